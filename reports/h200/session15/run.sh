#!/usr/bin/env bash
# Session 15 (issue 15), on one nvidia-h200 a call.
#
#   bash reports/h200/session15/run.sh SECONDS CALL
#
# Call 1: check.py (maxpool-offsets' Triton backward at the stem pool's shape: equal to the gather and ATen's,
# timed, its tile swept), then tests/gpu/resnet50-stem.toml: the tuned recipe with stem-pad, maxpool-offsets'
# kernel backward, both, and neither, on one machine, with the kernels probe.
# Calls 2 and 3: the ResNet-50 tune resumed from $S/tune-resnet50/results.json (session 14's, less its one
# maxpool-offsets record, which gathered inline: the technique's default backward is now the kernel, so the
# cell id would otherwise stand for what was not measured), with both techniques in its space, carrying call
# 1's inductor cache (.gpu/), so that the candidates call 1 compiled are cache hits; then the winner's selfcheck.
set -u
S=reports/h200/session15
END=$(($(date +%s) + ${1:-540}))
. reports/h200/lib.sh
probe_env
R=tests/gpu/tune-resnet50.toml
case "${2:-1}" in
1)
    timeout 120 python3 $S/check.py >>$S/check.jsonl 2>>$S/check.log
    run 0 tests/gpu/resnet50-stem.toml resnet50-stem -p plugins.probes.kernels
    ;;
2|3)
    tune 0 $R tune-resnet50
    [ "${2}" = 3 ] && selfcheck 0 tune-resnet50
    ;;
esac
finish session15
