#!/usr/bin/env bash
# Session 10 on one nvidia-h200-x2 machine (issue 15, ResNet-50 batch 256, 7,950 img/s).
#
#   bash reports/h200/session10/run.sh SECONDS CALL
#
# Call 1: GPU 0 runs conv_bn_probe.py (would MLPerf's cuDNN conv + batch-norm fusion pay here?);
# GPU 1 runs session 9's open question: the fuse operator's first version (293aaab, copied to
# .gpu/old293 by `git archive 293aaab suite plugins tests/gpu/cudnn-fused.toml`) against the
# committed one, with reduce-overhead, on one GPU, alternating.
set -u
S=reports/h200/session10
END=$(($(date +%s) + ${1:-540}))
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor PYTHONUNBUFFERED=1
mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
[ -d .gpu/kernels ] && cp -r .gpu/kernels/. "$TORCHINDUCTOR_CACHE_DIR/"

left() { echo $((END - $(date +%s))); }

run() { # GPU SUITE NAME [ARGS...]; OLD=1 runs 293aaab's code
    local gpu=$1 suite=$2 name=$3 path=$PYTHONPATH
    shift 3
    [ "${OLD:-0}" = 1 ] && path=$PWD/.gpu/old293:$PYTHONPATH
    echo "== $(date -u +%T) run $name on GPU $gpu (OLD=${OLD:-0})" >>"$S/$name.log"
    PYTHONPATH=$path CUDA_VISIBLE_DEVICES=$gpu timeout -s INT $(($(left) - 10)) python3 -m suite run "$suite" \
        --no-peaks --resume -o "$S/$name/results.json" --report-dir "$S/$name" "$@" >>"$S/$name.log" 2>&1
}

nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm,temperature.gpu --format=csv >"$S/env-$(date +%s).txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())" >>"$S/env-versions.txt" 2>&1
case "${2:-1}" in
1)
    (CUDA_VISIBLE_DEVICES=0 timeout $(($(left) - 15)) python3 "$S/conv_bn_probe.py" --out "$S/probe-bf16.json" \
        --budget $(($(left) - 150)) >"$S/probe-bf16.log" 2>&1) &
    (K="bf16-cl-compile-graphs or bf16-cl-compile-fused-graphs"
     run 1 tests/gpu/cudnn-fused.toml ab-new-1 -k "$K"
     OLD=1 run 1 .gpu/old293/tests/gpu/cudnn-fused.toml ab-old-1 -k "bf16-cl-compile-fused-graphs"
     run 1 tests/gpu/cudnn-fused.toml ab-new-2 -k "bf16-cl-compile-fused-graphs") &
    ;;
2) # the probe in fp16 (GPU 0) and again in bf16 (GPU 1), with cuDNN's whole reasons and up to 8 plans a graph
    (CUDA_VISIBLE_DEVICES=0 timeout $(($(left) - 15)) python3 "$S/conv_bn_probe.py" --out "$S/probe-fp16.json" \
        --dtype fp16 --plans 8 --budget $(($(left) - 150)) >"$S/probe-fp16.log" 2>&1) &
    (CUDA_VISIBLE_DEVICES=1 timeout $(($(left) - 15)) python3 "$S/conv_bn_probe.py" --out "$S/probe-bf16-2.json" \
        --dtype bf16 --plans 8 --budget $(($(left) - 150)) >"$S/probe-bf16-2.log" 2>&1) &
    ;;
3) # fp16 again with the prologue's scale and bias in fp16 and wgrad's output in fp16 (GPU 0); bf16 likewise (GPU 1)
    (CUDA_VISIBLE_DEVICES=0 timeout $(($(left) - 15)) python3 "$S/conv_bn_probe.py" --out "$S/probe-fp16-3.json" \
        --dtype fp16 --plans 8 --budget $(($(left) - 150)) >"$S/probe-fp16-3.log" 2>&1) &
    (CUDA_VISIBLE_DEVICES=1 timeout $(($(left) - 15)) python3 "$S/conv_bn_probe.py" --out "$S/probe-bf16-3.json" \
        --dtype bf16 --plans 8 --budget $(($(left) - 150)) >"$S/probe-bf16-3.log" 2>&1) &
    ;;
4) # inductor settings torch-compile does not expose, against the recipe's plain loop, one process each
    (CUDA_VISIBLE_DEVICES=0 timeout $(($(left) - 15)) python3 "$S/inductor_knobs.py" --out "$S/knobs-gpu0.json" --timeout 200 \
        default pointwise-autotune conv1x1-as-mm aggressive-fusion default >"$S/knobs-gpu0.log" 2>&1) &
    (CUDA_VISIBLE_DEVICES=1 timeout $(($(left) - 15)) python3 "$S/inductor_knobs.py" --out "$S/knobs-gpu1.json" --timeout 200 \
        default no-persistent-reductions no-split-reductions default >"$S/knobs-gpu1.log" 2>&1) &
    ;;
5) # torch-compile's pointwise_autotune option as cells, each pair on one GPU
    (run 0 tests/gpu/compile-pointwise.toml pointwise-default -k "compile and not graphs") &
    (run 1 tests/gpu/compile-pointwise.toml pointwise-graphs -k graphs) &
    ;;
6) # ViT-B/16's tuned recipe with and without pointwise_autotune, each pair on one GPU
    (run 0 tests/gpu/vit-tuned.toml vit-pointwise -k "tuned and not graphs") &
    (run 1 tests/gpu/vit-tuned.toml vit-pointwise-graphs -k "tuned-graphs") &
    ;;
7) # the probe as committed (its graph builders factored after call 3), fp16, to check it measures what call 3 did
    (CUDA_VISIBLE_DEVICES=0 timeout $(($(left) - 15)) python3 "$S/conv_bn_probe.py" --out "$S/probe-fp16-7.json" \
        --dtype fp16 --plans 8 --budget $(($(left) - 60)) >"$S/probe-fp16-7.log" 2>&1) &
    ;;
esac
wait
tar -czf "$OUT/session10.tgz" "$S" 2>/dev/null
