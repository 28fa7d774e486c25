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
    CUDA_VISIBLE_DEVICES=$1 timeout 240 python3 -m pytest -q -m cuda -p no:cacheprovider \
        tests/test_techniques_cudnn_fused.py tests/test_techniques_cudnn_batch_norm.py >"$S/cuda-tests.log" 2>&1
}

done_tune() { # results.json: every workload has a winner and a full ablation, and the run was not cut
    python3 - "$1" <<'PY'
import json, sys
try:
    tune = json.load(open(sys.argv[1]))["run"]["tune"]
except (OSError, KeyError, TypeError, ValueError):
    sys.exit(1)
rows = [r for w in tune["workloads"] for r in w.get("ablation") or []]
ok = not tune.get("incomplete") and all(w.get("winner") for w in tune["workloads"]) and rows
sys.exit(0 if ok and all(r["status"] not in ("interrupted", "not started (budget)") for r in rows) else 1)
PY
}

tune() { # GPU SUITE NAME
    local out=$S/$3 budget=$(($(left) - 25))
    [ -e "$out/finished" ] && return 0
    [ "$budget" -lt 60 ] && return 1
    echo "== $(date -u +%T) tune $3 on GPU $1, budget ${budget}s" >>"$S/$3.log"
    CUDA_VISIBLE_DEVICES=$1 timeout -s INT $((budget + 20)) \
        ampsuite tune "$2" --budget "${budget}s" --resume --report-dir "$out" >>"$S/$3.log" 2>&1
    done_tune "$out/results.json" && date -u +%FT%TZ >"$out/finished"
}

selfcheck() { # GPU NAME: the winner's selfcheck, unless its JSON already checks that winner
    python3 - "$S/tune-$2/results.json" "$S/selfcheck-$2.json" <<'PY' && return 0
import json, sys
try:
    winners = {f"tuned {w['winner']['cell_id']}" for w in json.load(open(sys.argv[1]))["run"]["tune"]["workloads"]}
    checked = {c["name"] for c in json.load(open(sys.argv[2]))["checks"]}
except (OSError, KeyError, TypeError, ValueError):
    sys.exit(1)
sys.exit(0 if winners <= checked else 1)
PY
    [ "$(left)" -lt 90 ] && return 1
    echo "== $(date -u +%T) selfcheck $2 on GPU $1" >>"$S/selfcheck-$2.log"
    CUDA_VISIBLE_DEVICES=$1 timeout -s INT $(($(left) - 10)) ampsuite selfcheck --device cuda \
        --tuned "$S/tune-$2/results.json" -o "$S/selfcheck-$2.json" >>"$S/selfcheck-$2.log" 2>&1
}

nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm,temperature.gpu --format=csv >"$S/env-$(date +%s).txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())" >>"$S/env-versions.txt" 2>&1
case "${2:-1}" in
1)
    (cuda_tests 0; run 0 tests/gpu/cudnn-fused.toml cudnn-fused-bf16 -k "fp32 or bf16") &
    (run 1 tests/gpu/cudnn-fused.toml cudnn-fused-fp16 -k "fp32 or fp16") &
    ;;
2) # call 2: the operator without running-statistics copies and with its sizes cached (host time), and the
    # kernels probe of it (GPU 0); tune with fuse = true in the space, from session 7's results less its
    # cudnn-batch-norm records, which were unfused (GPU 1)
    rm -f "$S/cuda-tests.log"
    (cuda_tests 0; run 0 tests/gpu/cudnn-fused.toml cudnn-fused-call2 -k "fp32 or bf16"
     [ "$(left)" -gt 150 ] && run 0 tests/gpu/cudnn-fused.toml cudnn-fused-kernels -p plugins.probes.kernels \
        -k "bf16-cl-compile-fused and not graphs") &
    (tune 1 tests/gpu/tune-resnet50.toml tune-resnet50 && selfcheck 1 resnet50) &
    ;;
3) # call 3: the tune goes on, and its winner against a plain loop (GPU 1); the CUDA tests, and CUDA graphs
    # with and without the fusion on one GPU (GPU 0), since call 1's gain came with CUDA graphs
    rm -f "$S/cuda-tests.log"
    (cuda_tests 0; run 0 tests/gpu/cudnn-fused.toml cudnn-fused-call3 -k "fp32 or (bf16 and graphs)") &
    (tune 1 tests/gpu/tune-resnet50.toml tune-resnet50 && selfcheck 1 resnet50) &
    ;;
4) # call 4: the tune measures the candidate call 2's budget left out (GPU 1; call 3 found the run marked
    # finished and did not tune); the compiled step with and without CUDA graphs on one GPU (GPU 0)
    (tune 1 tests/gpu/tune-resnet50.toml tune-resnet50) &
    (run 0 tests/gpu/cudnn-fused.toml cudnn-fused-call4 -k "fp32 or bf16-cl-compile/ or bf16-cl-compile-graphs") &
    ;;
*) # call 5: ViT-B/16's tune from a copy of session 8's results, for the two ablation rows its budget left
    # out (GPU 0); cuDNN's benchmark mode timing every algorithm for ResNet-50 (GPU 1)
    (tune 0 tests/gpu/tune-vit-b16.toml tune-vit-b16) &
    (run 1 tests/gpu/cudnn-limit.toml cudnn-limit) &
    ;;
esac
wait
find "$TORCHINDUCTOR_CACHE_DIR" -name '*.best_config' -printf '%P\n' >/tmp/tuned.txt
tar czf "${OUT:-/tmp}/results.tgz" "$S"
