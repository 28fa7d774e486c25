#!/usr/bin/env bash
# Session 21 (issue 15): a persistent batch norm + ReLU kernel (plugins/techniques/_persistent_bn_kernels.py)
# against inductor's, shape by shape, then in ResNet-50's step, on one nvidia-h200:
#
#   bash reports/h200/session21/run.sh SECONDS CALL [SUFFIX]      run(timeout_s=600)
#
# Call 1 (three times: the first failed to compile, then without and with prefetching, SUFFIX -prefetch) times the
# kernels shape by shape; call 2 checks the version with atomic sums under torch.compile on a small model, then runs
# the recipe with and without persistent-batch-norm (tests/gpu/resnet50-bn.toml); call 3, if there is time for it,
# times that version shape by shape and runs the cell with every batch norm + ReLU through the kernels.
set -u
S=${S:-reports/h200/session21}
mkdir -p "$S"
END=$(($(date +%s) + ${1:-560}))
. reports/h200/lib.sh
case "${2:-1}" in
1)
    probe_env
    timeout $(($(left) - 20)) python3 reports/h200/bn_persistent.py --out "$S/bn-persistent${3:-}.json" >"$S/bn-persistent${3:-}.log" 2>&1
    echo "bench rc $?" >>"$S/bn-persistent${3:-}.log"
    finish "$(basename "$S")" nocache
    ;;
2)
    # the kernels under torch.compile on a small model, then the recipe with and without them (stem only), one
    # machine, in the foreground: the device time left after the machines refused is one call
    probe_env
    timeout 200 python3 reports/h200/session21/smoke.py >"$S/smoke.log" 2>&1
    echo "smoke rc $?" >>"$S/smoke.log"
    grep -q "smoke ok" "$S/smoke.log" && run 0 tests/gpu/resnet50-bn.toml resnet50-bn -k "tuned and not all"
    finish "$(basename "$S")" nocache
    ;;
4)
    # call 2's skipped cell again (--resume keeps its measured one) after the fx rewrite left other techniques'
    # modules whole (into a file of its own: --resume keeps a skip's record)
    run 0 tests/gpu/resnet50-bn.toml resnet50-bn-stem -k "tuned-bn and not all"
    finish "$(basename "$S")" nocache
    ;;
3)
    # with what is left: the shapes with atomic sums, then the cell with every pair through the kernels
    timeout 200 python3 reports/h200/bn_persistent.py --iters 20 --out "$S/bn-persistent-atomics.json" >"$S/bn-persistent-atomics.log" 2>&1
    echo "bench rc $?" >>"$S/bn-persistent-atomics.log"
    run 0 tests/gpu/resnet50-bn.toml resnet50-bn -k "all"
    finish "$(basename "$S")" nocache
    ;;
esac
