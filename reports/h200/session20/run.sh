#!/usr/bin/env bash
# Session 20 (issue 15): ResNet-50's batch norms one shape at a time on one nvidia-h200, inductor's kernels
# against hand-written Triton ones and the traffic bound (reports/h200/bn_kernels.py, prepared in session 19):
#
#   bash reports/h200/session20/run.sh SECONDS CALL      run(timeout_s=600); calls 3 and 4 back to back
#
# Call 1 timed each pass from the host (host-bound for most shapes); call 2 timed it as CUDA graph replays. Calls
# 3-4 resume the ResNet-50 tune (session 19's head start) for the rest of the device time.
set -u
S=${S:-reports/h200/session20}
mkdir -p "$S"
END=$(($(date +%s) + ${1:-560}))
. reports/h200/lib.sh
case "${2:-1}" in
1)
    probe_env
    nvidia-smi -q -d CLOCK,POWER | grep -E "SM|Graphics|Power Limit|Power Draw" | head -12 >>"$S/env-versions.txt"
    timeout 120 python3 reports/h200/bn_kernels.py --check >"$S/bn-check.log" 2>&1
    echo "check rc $?" >>"$S/bn-check.log"
    timeout $(($(left) - 20)) python3 reports/h200/bn_kernels.py --out "$S/bn-kernels.json" >"$S/bn-kernels.log" 2>&1
    echo "bench rc $?" >>"$S/bn-kernels.log"
    finish "$(basename "$S")" nocache
    ;;
2)
    # the same, each pass timed as CUDA graph replays (GPU time) and agreement measured in the norm
    timeout $(($(left) - 20)) python3 reports/h200/bn_kernels.py --out "$S/bn-kernels-graphs.json" >"$S/bn-kernels-graphs.log" 2>&1
    echo "bench rc $?" >>"$S/bn-kernels-graphs.log"
    finish "$(basename "$S")" nocache
    ;;
3)
    # the ResNet-50 tune resumed from a copy of session 17's file with session 19's head start, in the background
    # across calls 3 and 4 (the rest of the session's device time)
    probe_env
    if [ ! -f "$S/tune-resnet50/results.json" ]; then
        mkdir -p "$S/tune-resnet50"
        cp reports/h200/session17/tune-resnet50/results.json "$S/tune-resnet50/"
    fi
    tune_bg 0 tests/gpu/tune-resnet50.toml tune-resnet50 "${3:-1050}"
    wait_bg tune-resnet50
    finish "$(basename "$S")" nocache
    ;;
4)
    wait_bg tune-resnet50
    finish "$(basename "$S")"
    ;;
esac
