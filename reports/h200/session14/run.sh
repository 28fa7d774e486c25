#!/usr/bin/env bash
# Session 14 (issue 15), on one nvidia-h200 a call.
#
#   bash reports/h200/session14/run.sh SECONDS CALL
#
# Call 1: the probes (probe.py: the stem max pool compiled both ways, cudnn.benchmark_limit 10 and 0,
# the stem convolution at 3, 4 and 8 input channels), then the ResNet-50 tune resumed from session 13's
# results with maxpool-offsets in its space when the pool probe shows it faster. It tried no
# maxpool-offsets candidate: the greedy search had pruned it at its first step, before any compile (fixed).
# Call 2: the tune again, on call 1's inductor cache: it screened fp16 + compile + maxpool-offsets, and
# the budget refused the later steps' maxpool-offsets candidates (~225 s compiles each).
# Call 3: the winner with maxpool-offsets as an `ampsuite run` cell (tests/gpu/resnet50-pool.toml): slower
# than the winner, its batch-norm kernels 1.06 ms longer while the element-wise ones were 1.23 ms shorter.
# Call 4: probe.py stemctx, the stem and the pool's two consumers compiled with each pool: does storing
# the pool's input gradient (rather than inductor inlining it into the batch-norm backward) keep the gain?
set -u
S=reports/h200/session14
END=$(($(date +%s) + ${1:-540}))
. reports/h200/lib.sh
probe_env
mkdir -p $S/tune-resnet50
[ -e $S/tune-resnet50/results.json ] || cp reports/h200/session13/tune-resnet50/results.json $S/tune-resnet50/
R=tests/gpu/tune-resnet50.toml
probe() { echo "== $(date -u +%T) probe $*" >>$S/probe.log; timeout 150 python3 $S/probe.py "$@" >>$S/probe.jsonl 2>>$S/probe.log; }
CALL=${2:-1}
case "$CALL" in
1)
    probe pool
    probe cudnn 10
    probe cudnn 0
    probe stem
    # the tune only when the offsets' forward + backward beat ATen's lowering by 0.3 ms or more
    if python3 -c "
import json, sys
p = [json.loads(l) for l in open('$S/probe.jsonl') if '\"pool\"' in l][-1]
sys.exit(0 if p['offsets']['fwd_bwd_ms'] < p['aten']['fwd_bwd_ms'] - 0.3 else 1)" 2>>$S/probe.log; then
        tune 0 $R tune-resnet50 -p plugins.probes.kernels
    else
        echo "pool probe: no gain, no tune" >>$S/probe.log
    fi
    ;;
2)
    tune 0 $R tune-resnet50 -p plugins.probes.kernels
    ;;
3)
    run 0 tests/gpu/resnet50-pool.toml resnet50-pool -p plugins.probes.kernels
    ;;
4)
    probe stemctx
    ;;
esac
finish session14
