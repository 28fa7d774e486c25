#!/usr/bin/env bash
# Session 12 (issue 15, ResNet-50 batch 256, 7,950 img/s), on one nvidia-h200 a call.
#
#   bash reports/h200/session12/run.sh SECONDS CALL
#
# Call 1: the recipe's whole-step variants in a plain loop (recipes.py): every variant compiled at once
# first, then each measured alone from inductor's cache, the winner of session 11 first.
# Call 2: the ResNet-50 tune (tests/gpu/tune-resnet50.toml: fp16 and bf16 paths, fused SGD in the
# space) from session 11's results less their compiled records, with the kernels probe (the precision
# of the kernels each cell ran). Its budget went to compiles (157 s a compiled cell on a cold cache).
# Call 3: the recipes as cells (tests/gpu/resnet-recipes.toml) and the fp16 one against a plain loop.
# Call 4: the same recipe with the whole step, loss scaler included, in one CUDA graph.
set -u
S=reports/h200/session12
END=$(($(date +%s) + ${1:-540}))
. reports/h200/lib.sh
probe_env
case "${2:-1}" in
1)
    timeout $(($(left) - 5)) python3 $S/recipes.py --out $S/recipes-1.json --warm-first 300 --deadline $((END - 40)) \
        ro-tile ro-tile-pw g-tile-pw g-tile-pw-fused ro-tile-pw-aggr ro-tile-pw-fp16 >$S/recipes-1.log 2>&1
    ;;
2)
    tune 0 tests/gpu/tune-resnet50.toml tune-resnet50 -p plugins.probes.kernels
    ;;
3) # the recipes as cells (tests/gpu/resnet-recipes.toml), the fp16 one against a plain loop first
    run 0 tests/gpu/resnet-recipes.toml recipes-run -p plugins.probes.kernels -k "fp32 or fp16-cl-compile-fused"
    echo "== $(date -u +%T) selfcheck" >>$S/selfcheck-recipes.log
    CUDA_VISIBLE_DEVICES=0 timeout -s INT $(($(left) - 200)) python3 -m suite selfcheck --device cuda \
        --cells $S/recipes-run/results.json -k fp16-cl-compile-fused -o $S/selfcheck-recipes.json \
        >>$S/selfcheck-recipes.log 2>&1
    run 0 tests/gpu/resnet-recipes.toml recipes-run -p plugins.probes.kernels
    ;;
4) # the whole step in one graph, loss scaler included (cuda-graphs with fused SGD)
    run 0 tests/gpu/resnet-recipes.toml recipes-run -p plugins.probes.kernels -k fp16-cl-compile-fused-graphs
    ;;
esac
finish session12
