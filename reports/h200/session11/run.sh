#!/usr/bin/env bash
# Session 11 (issue 15, ResNet-50 batch 256, 7,950 img/s): call 1 on nvidia-h200-x2, calls 2 and 4 on
# nvidia-h200 (no two-GPU machine was lent after call 1).
#
#   bash reports/h200/session11/run.sh SECONDS CALL
#
# Call 1: inductor's reduction schedules against the recipe's plain loop (../session10/inductor_knobs.py),
# one process a setting, each GPU with its own default first. Batch norm is half the compiled step, and
# its channels-last statistics are column reductions.
# Call 2: see below; every later call goes on where the one before stopped (--resume).
set -u
S=reports/h200/session11
END=$(($(date +%s) + ${1:-540}))
. reports/h200/lib.sh
probe_env
knobs() { # GPU OUT NAME...
    local gpu=$1 out=$2
    shift 2
    CUDA_VISIBLE_DEVICES=$gpu timeout $(($(left) - 15)) python3 reports/h200/session10/inductor_knobs.py \
        --out "$S/$out.json" --timeout 170 "$@" >"$S/$out.log" 2>&1
}
case "${2:-1}" in
1)
    knobs 0 knobs-1-gpu0 default cooperative-reductions tile-reductions-nd mix-order-on multi-kernel &
    knobs 1 knobs-1-gpu1 default nd-tiling max-tiles-3 mix-order-off combo-kernels benchmark-fusion &
    ;;
2) # the tune from a copy of session 9's results with tile_reductions in the space (one GPU: from call 2
   # on, no machine of two was lent)
    tune 0 tests/gpu/tune-resnet50.toml tune-resnet50 &
    ;;
4) # the winner of calls 2-3 against a plain loop (its compile then cached), then the tune goes on
    selfcheck 0 tune-resnet50
    tune 0 tests/gpu/tune-resnet50.toml tune-resnet50
    ;;
esac
finish session11
