#!/usr/bin/env bash
# Session 8 on one nvidia-h200-x2 machine: FP8 products for ViT-B/16 (issue 15's 3,600 img/s target).
# GPU 0 runs fp8's CUDA tests, then tunes ViT-B/16 with fp8 in its space (tests/gpu/tune-vit-b16.toml)
# and checks the winner against a plain loop; GPU 1 compares compiled BF16 with compiled FP8 variants
# (tests/gpu/fp8-vit.toml). Every step resumes: the same command in the next device call goes on
# where this one stopped (tune --resume, run --resume; a selfcheck with its JSON is done).
#
#   bash reports/h200/session8/run.sh SECONDS [CALL]   # the time this call may use (the device's limit is 600 s)
#
# tune-vit-b16/results.json started as a copy of session 7's: its records are reused, and tune
# measures only the candidates fp8 adds. Inductor's coordinate-descent block sizes (*.best_config)
# travel between calls and sessions in .gpu/kernels.
set -u
S=reports/h200/session8
END=$(($(date +%s) + ${1:-540}))
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor PYTHONUNBUFFERED=1
mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
[ -d .gpu/kernels ] && cp -r .gpu/kernels/. "$TORCHINDUCTOR_CACHE_DIR/"

left() { echo $((END - $(date +%s))); }

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

run() { # GPU SUITE NAME [ARGS...]
    local gpu=$1 suite=$2 name=$3
    shift 3
    echo "== $(date -u +%T) run $name on GPU $gpu" >>"$S/$name.log"
    CUDA_VISIBLE_DEVICES=$gpu timeout -s INT $(($(left) - 10)) ampsuite run "$suite" --no-peaks --resume \
        -o "$S/$name/results.json" --report-dir "$S/$name" "$@" >>"$S/$name.log" 2>&1
}

cuda_tests() { # fp8's tests on a GPU, once
    [ -e "$S/cuda-tests.log" ] && grep -q " passed" "$S/cuda-tests.log" && return 0
    CUDA_VISIBLE_DEVICES=${1:-0} timeout 120 python3 -m pytest -q -m cuda -p no:cacheprovider \
        tests/test_fp8.py tests/test_techniques_patch_gemm.py >"$S/cuda-tests.log" 2>&1
}

nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm,temperature.gpu --format=csv >"$S/env-$(date +%s).txt" 2>&1
python3 -c "import torch, torchao; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'torchao', torchao.__version__)" >>"$S/env-versions.txt" 2>&1
case "${2:-1}" in
1)
    (cuda_tests 0; tune 0 tests/gpu/tune-vit-b16.toml tune-vit-b16 && selfcheck 0 vit-b16) &
    (run 1 tests/gpu/fp8-vit.toml fp8-vit) &
    ;;
2) # call 2: where the time goes (kernels probe), the tuned recipe's kernels on GPU 0, the rest on GPU 1
    (run 0 tests/gpu/vit-kernels.toml vit-kernels -p plugins.probes.kernels -k "bf16-compile-cd") &
    (run 1 tests/gpu/vit-kernels.toml vit-kernels-1 -p plugins.probes.kernels -k "not bf16-compile-cd and not patch and not channels") &
    ;;
3) # call 3: the tune again with patch-gemm in its space (GPU 0); the patch embedding's kernels (GPU 1)
    rm -f "$S/tune-vit-b16/finished" "$S/cuda-tests.log"
    (tune 0 tests/gpu/tune-vit-b16.toml tune-vit-b16 && selfcheck 0 vit-b16) &
    (cuda_tests 1; run 1 tests/gpu/vit-kernels.toml vit-kernels-2 -p plugins.probes.kernels -k "patch or channels") &
    ;;
4) # call 4: the tune goes on (GPU 0); call 3's winner against a plain loop, from a copy of its file (GPU 1)
    # (call 4's tune did not run: the tree it was given still had call 1's tune-vit-b16/finished)
    rm -f "$S/cuda-tests.log" # the GPU test of patch-gemm changed after call 3
    cp "$S/tune-vit-b16/results.json" "$S/tune-vit-b16-call3.json"
    (tune 0 tests/gpu/tune-vit-b16.toml tune-vit-b16 && selfcheck 0 vit-b16) &
    (cuda_tests 1; echo "== $(date -u +%T) selfcheck of call 3's winner on GPU 1" >>"$S/selfcheck-vit-b16-call3.log"
     CUDA_VISIBLE_DEVICES=1 timeout -s INT $(($(left) - 10)) ampsuite selfcheck --device cuda \
        --tuned "$S/tune-vit-b16-call3.json" -o "$S/selfcheck-vit-b16-call3.json" >>"$S/selfcheck-vit-b16-call3.log" 2>&1) &
    ;;
*) # call 5: the tune goes on (GPU 0); the tuned recipe as an ordinary suite, with and without CUDA graphs (GPU 1)
    rm -f "$S/tune-vit-b16/finished"
    (tune 0 tests/gpu/tune-vit-b16.toml tune-vit-b16) &
    (run 1 tests/gpu/vit-tuned.toml vit-tuned) &
    ;;
esac
wait
find "$TORCHINDUCTOR_CACHE_DIR" -name '*.best_config' -printf '%P\n' >/tmp/tuned.txt
tar czf "${OUT:-/tmp}/results.tgz" "$S"
tar czf "${OUT:-/tmp}/kernels.tgz" -C "$TORCHINDUCTOR_CACHE_DIR" -T /tmp/tuned.txt
