#!/usr/bin/env bash
# Session 9 on one nvidia-h200-x2 machine: ResNet-50 batch 256 with cudnn-batch-norm's fuse option
# (cuDNN's NHWC batch norm + residual add + ReLU in one call, issue 15's 7,950 img/s target).
# Every step resumes: the same command in the next device call goes on where this one stopped.
#
#   bash reports/h200/session9/run.sh SECONDS [CALL]   # the time this call may use (the device's limit is 600 s)
set -u
S=reports/h200/session9
END=$(($(date +%s) + ${1:-540}))
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor PYTHONUNBUFFERED=1
mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
[ -d .gpu/kernels ] && cp -r .gpu/kernels/. "$TORCHINDUCTOR_CACHE_DIR/"

left() { echo $((END - $(date +%s))); }

run() { # GPU SUITE NAME [ARGS...]
    local gpu=$1 suite=$2 name=$3
    shift 3
    echo "== $(date -u +%T) run $name on GPU $gpu" >>"$S/$name.log"
    CUDA_VISIBLE_DEVICES=$gpu timeout -s INT $(($(left) - 10)) ampsuite run "$suite" --no-peaks --resume \
        -o "$S/$name/results.json" --report-dir "$S/$name" "$@" >>"$S/$name.log" 2>&1
}

cuda_tests() { # GPU: the fused operators' tests and cudnn-batch-norm's, once
    [ -e "$S/cuda-tests.log" ] && grep -q " passed" "$S/cuda-tests.log" && ! grep -q " failed" "$S/cuda-tests.log" && return 0
    CUDA_VISIBLE_DEVICES=$1 timeout 240 python3 -m pytest -q -m cuda -p no:cacheprovider -x \
        tests/test_techniques_cudnn_fused.py tests/test_techniques_cudnn_batch_norm.py >"$S/cuda-tests.log" 2>&1
}

nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm,temperature.gpu --format=csv >"$S/env-$(date +%s).txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())" >>"$S/env-versions.txt" 2>&1
case "${2:-1}" in
1)
    (cuda_tests 0; run 0 tests/gpu/cudnn-fused.toml cudnn-fused-bf16 -k "fp32 or bf16") &
    (run 1 tests/gpu/cudnn-fused.toml cudnn-fused-fp16 -k "fp32 or fp16") &
    ;;
esac
wait
find "$TORCHINDUCTOR_CACHE_DIR" -name '*.best_config' -printf '%P\n' >/tmp/tuned.txt
tar czf "${OUT:-/tmp}/results.tgz" "$S"
