#!/usr/bin/env bash
# Session 23 (issue 15): ResNet-50's tuned recipe with persistent-batch-norm on all 33 batch norm + ReLU pairs, now
# that they break no graph (session 22's cell gave no step in 450 s with 42 breaks), with 4 and with 8 warps a
# program, beside the stem alone and the recipe without; then the kernels timed shape by shape, on one nvidia-h200:
#
#   bash reports/h200/session23/run.sh SECONDS      run(timeout_s=600), the same command every call
#
# Every call: start the cells of tests/gpu/resnet50-bn.toml -k tuned (tuned-bn-all, tuned-bn-all-w8, tuned-bn,
# tuned, in that order, each in its own process) in the background unless they run or ran on this machine, and
# wait for them; once they are done, time the kernels (reports/h200/bn_persistent.py: the persistent sweep of every
# shape first, then inductor's) with what is left of the call.
set -u
S=${S:-reports/h200/session23}
mkdir -p "$S"
END=$(($(date +%s) + ${1:-560}))
. reports/h200/lib.sh
[ -f "$B/env-done" ] || { probe_env; touch "$B/env-done"; }
if [ ! -f "$B/resnet50-bn.done" ]; then
    run_bg 0 tests/gpu/resnet50-bn.toml resnet50-bn -k tuned --timeout 600
    wait_bg resnet50-bn
    kill -0 "$(cat "$B/resnet50-bn.pid")" 2>/dev/null || touch "$B/resnet50-bn.done"
fi
if [ -f "$B/resnet50-bn.done" ] && enough 90; then
    echo "== $(date -u +%T) bn_persistent, $(left) s left" >>"$S/bn-persistent.log"
    timeout $(($(left) - 30)) python3 reports/h200/bn_persistent.py --iters 20 --no-compiled \
        --out "$S/bn-persistent.json" >>"$S/bn-persistent.log" 2>&1
    echo "bench rc $?" >>"$S/bn-persistent.log"
fi
finish "$(basename "$S")" nocache
