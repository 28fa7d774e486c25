#!/usr/bin/env bash
# Session 22 (issue 15): session 21's persistent batch norm with atomic sums (v3), timed shape by shape, then
# ResNet-50's tuned recipe with and without persistent-batch-norm in the step, on one nvidia-h200:
#
#   bash reports/h200/session22/run.sh SECONDS CALL      run(timeout_s=600)
#
# Call 1 times the kernels (reports/h200/bn_persistent.py) alone on the GPU, then starts the cells of
# tests/gpu/resnet50-bn.toml (tuned-bn, tuned, tuned-bn-all, in that order, each in its own process) in the
# background, so that they run on across calls while the machine is held; call 2 waits for them (it ran twice);
# call 3 runs the cell with every pair through the kernels again, alone.
set -u
S=${S:-reports/h200/session22}
mkdir -p "$S"
END=$(($(date +%s) + ${1:-560}))
. reports/h200/lib.sh
case "${2:-1}" in
1)
    probe_env
    timeout 200 python3 reports/h200/bn_persistent.py --iters 20 --out "$S/bn-persistent-atomics.json" \
        >"$S/bn-persistent-atomics.log" 2>&1
    echo "bench rc $?" >>"$S/bn-persistent-atomics.log"
    run_bg 0 tests/gpu/resnet50-bn.toml resnet50-bn -k tuned
    wait_bg resnet50-bn
    finish "$(basename "$S")" nocache
    ;;
2)
    # the cells started by call 1, on the same held machine (a fresh one starts them again: --resume)
    run_bg 0 tests/gpu/resnet50-bn.toml resnet50-bn -k tuned
    wait_bg resnet50-bn
    finish "$(basename "$S")" nocache
    ;;
3)
    # tuned-bn-all again, with a longer timeout than the suite's 420 s and the first attempt's inductor cache
    run 0 tests/gpu/resnet50-bn.toml resnet50-bn-all -k all --timeout 450
    finish "$(basename "$S")" nocache
    ;;
esac
