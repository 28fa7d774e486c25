#!/usr/bin/env bash
# Session 18 (issue 15): ResNet-50's best measured combination against the same with the model itself in fp16
# (half-weights, Apex O2) and with inductor's programmatic dependent launch and horizontal fusion, on one
# nvidia-h200 (tests/gpu/resnet50-o2.toml, kernels probe on):
#
#   bash reports/h200/session18/run.sh SECONDS CALL      run(timeout_s=600), calls 1-3 back to back
#
# Call 1 starts the suite in a process session of its own (run_bg), which runs on across calls 2 and 3 while the
# machine is held; each call sends back what it wrote so far, call 3 with inductor's autotuning choices. Each call
# must follow the last within the machine's 30 s idle window (--resume goes on from the file a call brought back).
#
# What ran: calls 1-3 (531, 521 and 146 s) measured the six cells in resnet50-o2/; a fourth call on the still-held
# machine ran `run 0 tests/gpu/resnet50-o2.toml resnet50-o2-repeat -k "not pdl" -p plugins.probes.kernels` (lib.sh's
# run, 121 s with inductor's cache warm) into resnet50-o2-repeat/. 1,486 s of device time in all.
set -u
S=${S:-reports/h200/session18}
mkdir -p "$S"
END=$(($(date +%s) + ${1:-560}))
. reports/h200/lib.sh
N=resnet50-o2
case "${2:-1}" in
1)
    probe_env
    python3 -c "import torch._inductor.config as c; print('inductor: triton.enable_pdl', hasattr(c.triton, 'enable_pdl'), 'combo_kernels', hasattr(c, 'combo_kernels'))" >>"$S/env-versions.txt" 2>&1
    run_bg 0 tests/gpu/resnet50-o2.toml $N -p plugins.probes.kernels
    wait_bg $N
    finish "$(basename "$S")" nocache
    ;;
2)
    wait_bg $N
    finish "$(basename "$S")" nocache
    ;;
3)
    wait_bg $N
    finish "$(basename "$S")"
    ;;
esac
