#!/usr/bin/env bash
# Session 15 (issue 15), on one nvidia-h200 a call.
#
#   bash reports/h200/session15/run.sh SECONDS CALL
#
# What ran (one machine for all five calls, the first fresh, the others warm, 1,582 s of device time):
# Call 1 (`run.sh 540 1`): check.py failed to import `plugins` (run as a script, the checkout was not on its
# path: check-call1.log), so the run kept to the cells without maxpool-offsets (-k "not pool"):
# resnet50-stem-call1/ (fp32, tuned 33.518 ms, tuned-stem 33.229 ms).
# Call 2 (the same, check.py on PYTHONPATH): check.jsonl; the stem suite from a results file without call 1's
# records (they had not been brought back into the checkout that the call copies), so fp32 and tuned ran
# again; tuned-pool was cut by the call's end. Call 3 (`run.sh 470 1b`): --resume, tuned-pool and tuned-stem
# (resnet50-stem/ holds calls 2 and 3). Call 4: `ampsuite selfcheck --cells` of tuned-stem-pool
# (selfcheck-stem-pool.*). Call 5: fp32, tuned-stem-pool and tuned once more (resnet50-stem-repeat/).
#
# Call 1: check.py (maxpool-offsets' Triton backward at the stem pool's shape: equal to the gather and ATen's,
# timed, its tile swept), then tests/gpu/resnet50-stem.toml: the tuned recipe with stem-pad, maxpool-offsets'
# kernel backward, both, and neither, on one machine, with the kernels probe. Call 1b: that suite resumed.
# Calls 2 and 3 (not run in session 15): the ResNet-50 tune resumed from $S/tune-resnet50/results.json
# (session 14's, less its one maxpool-offsets record, which gathered inline: the technique's default backward
# is now the kernel, so the cell id would otherwise stand for what was not measured), with both techniques in
# its space; then the winner's selfcheck.
set -u
S=reports/h200/session15
END=$(($(date +%s) + ${1:-540}))
. reports/h200/lib.sh
probe_env
R=tests/gpu/tune-resnet50.toml
case "${2:-1}" in
1)
    # a kernel that fails its check is not worth a compile: then only the cells without it
    if PYTHONPATH=$PWD timeout 150 python3 $S/check.py >>$S/check.jsonl 2>>$S/check.log; then
        run 0 tests/gpu/resnet50-stem.toml resnet50-stem -p plugins.probes.kernels
    else
        run 0 tests/gpu/resnet50-stem.toml resnet50-stem -p plugins.probes.kernels -k "not pool"
    fi
    ;;
1b)
    run 0 tests/gpu/resnet50-stem.toml resnet50-stem -p plugins.probes.kernels
    ;;
2|3)
    tune 0 $R tune-resnet50
    [ "${2}" = 3 ] && selfcheck 0 tune-resnet50
    ;;
esac
finish session15
