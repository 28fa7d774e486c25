#!/usr/bin/env bash
# Session 7 on one nvidia-h200-x2 machine: GPU 0 runs the cudnn-batch-norm technique's CUDA tests,
# then tunes ResNet-50 with that technique in its space; GPU 1 tunes ViT-B/16 with max-autotune
# declared; then each winner's selfcheck. Every step resumes: the same command in the next device
# call goes on where this one stopped (tune --resume; a selfcheck with its JSON is done).
#
#   bash reports/h200/session7/run.sh SECONDS [CALL]   # the time this call may use (the device's limit is 600 s)
#
# The results files started as copies of session 6's: their records are reused, and tune measures
# only the candidates the new technique and the new mode add (and the ablation rows they change).
# Inductor's coordinate-descent block sizes (*.best_config) travel between calls in .gpu/kernels, so a
# kernel tuned in one call is not tuned again on a fresh machine.
set -u
S=reports/h200/session7
END=$(($(date +%s) + ${1:-540}))
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor PYTHONUNBUFFERED=1
mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
[ -d .gpu/kernels ] && cp -r .gpu/kernels/. "$TORCHINDUCTOR_CACHE_DIR/"

left() { echo $((END - $(date +%s))); }

done_tune() { # results.json: every workload has a winner and a full ablation, and the run was not cut
    python3 - "$1" <<'EOF'
import json, sys
try:
    tune = json.load(open(sys.argv[1]))["run"]["tune"]
except (OSError, KeyError, TypeError, ValueError):
    sys.exit(1)
rows = [r for w in tune["workloads"] for r in w.get("ablation") or []]
ok = not tune.get("incomplete") and all(w.get("winner") for w in tune["workloads"]) and rows
sys.exit(0 if ok and all(r["status"] not in ("interrupted", "not started (budget)") for r in rows) else 1)
EOF
}

tune() { # GPU SUITE NAME
    local out=$S/$3 budget=$(($(left) - 25))
    [ -e "$out/finished" ] && return 0 # by a tune of this session (the copied files are finished too)
    [ "$budget" -lt 60 ] && return 1
    echo "== $(date -u +%T) tune $3 on GPU $1, budget ${budget}s" >>"$S/$3.log"
    CUDA_VISIBLE_DEVICES=$1 timeout -s INT $((budget + 20)) \
        ampsuite tune "$2" --budget "${budget}s" --resume --report-dir "$out" >>"$S/$3.log" 2>&1
    done_tune "$out/results.json" && date -u +%FT%TZ >"$out/finished"
}

selfcheck() { # GPU NAME: the winner's selfcheck, unless its JSON already checks that winner
    python3 - "$S/tune-$2/results.json" "$S/selfcheck-$2.json" <<'EOF' && return 0
import json, sys
try:
    winners = {f"tuned {w['winner']['cell_id']}" for w in json.load(open(sys.argv[1]))["run"]["tune"]["workloads"]}
    checked = {c["name"] for c in json.load(open(sys.argv[2]))["checks"]}
except (OSError, KeyError, TypeError, ValueError):
    sys.exit(1)
sys.exit(0 if winners <= checked else 1)
EOF
    [ "$(left)" -lt 90 ] && return 1
    echo "== $(date -u +%T) selfcheck $2 on GPU $1" >>"$S/selfcheck-$2.log"
    CUDA_VISIBLE_DEVICES=$1 timeout -s INT $(($(left) - 10)) ampsuite selfcheck --device cuda \
        --tuned "$S/tune-$2/results.json" -o "$S/selfcheck-$2.json" >>"$S/selfcheck-$2.log" 2>&1
}

nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm,temperature.gpu --format=csv >"$S/env-$(date +%s).txt" 2>&1
cuda_tests() { # the technique's tests on a GPU, once
    [ -e "$S/cuda-tests.log" ] && grep -q " passed" "$S/cuda-tests.log" && return 0
    CUDA_VISIBLE_DEVICES=${1:-0} timeout 120 python3 -m pytest -q -m cuda -p no:cacheprovider \
        tests/test_techniques_cudnn_batch_norm.py >"$S/cuda-tests.log" 2>&1
}
if [ "${2:-1}" = 1 ]; then # call 1
    (cuda_tests; tune 0 tests/gpu/tune-resnet50.toml tune-resnet50 && selfcheck 0 resnet50) &
    # tune-vit-b16-max-autotune/ was this call's tune-vit-b16/ (renamed after it: its winner is not the suite's)
    (tune 1 $S/tune-vit-b16-max-autotune.toml tune-vit-b16 && selfcheck 1 vit-b16) &
elif [ "$2" = 2 ]; then # call 2: ViT-B/16 at batch 512 (GPU 0); session 6's ViT-B/16 ablation row left unmeasured (GPU 1)
    (tune 0 $S/tune-vit-b16-bs512.toml tune-vit-b16-bs512) &
    (tune 1 tests/gpu/tune-vit-b16.toml tune-vit-b16) &
else # call 3: where the time goes with cudnn-batch-norm (kernels probe), with and without a loss scale
    profile() { # GPU SUITE NAME
        echo "== $(date -u +%T) run $3 on GPU $1" >>"$S/$3.log"
        CUDA_VISIBLE_DEVICES=$1 timeout -s INT $(($(left) - 10)) ampsuite run "$2" -p plugins.probes.kernels \
            --no-peaks --resume -o "$S/$3/results.json" --report-dir "$S/$3" >>"$S/$3.log" 2>&1
    }
    rm -f "$S/cuda-tests.log" # the operator's backward changed after call 1: its CUDA tests run again
    (profile 0 tests/gpu/cudnn-bn.toml cudnn-bn) &
    (cuda_tests 1; profile 1 tests/gpu/cudnn-bn-noscaler.toml cudnn-bn-noscaler) &
fi
wait
find "$TORCHINDUCTOR_CACHE_DIR" -name '*.best_config' -printf '%P\n' >/tmp/tuned.txt
tar czf "${OUT:-/tmp}/results.tgz" "$S"
tar czf "${OUT:-/tmp}/kernels.tgz" -C "$TORCHINDUCTOR_CACHE_DIR" -T /tmp/tuned.txt
du -sh "$TORCHINDUCTOR_CACHE_DIR" >"${OUT:-/tmp}/cache-size.txt" 2>&1
