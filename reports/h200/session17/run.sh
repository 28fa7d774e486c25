#!/usr/bin/env bash
# Session 17 (issue 15): session 16's plan (reports/h200/session16/run.sh), run on one nvidia-h200. This checkout is
# fresh, so session 15's inductor cache is gone and every compile runs cold (~200 s):
#
#   bash reports/h200/session17/run.sh SECONDS CALL [TUNE_SECONDS]      run(timeout_s=600)
#
# Call 1 starts the ResNet-50 tune, resumed from session 15's file, in a process session of its own (tune_bg) on one
# budget of TUNE_SECONDS (1300: what the session's 30 minutes leave after the machine's start and three calls'
# transfers); calls 2 and 3 wait for it and send back what it wrote, call 3 with inductor's cache. Each call must
# follow the last within the machine's 30 s idle window, or the machine goes back and the run with it (nothing
# measured is lost: --resume goes on from the file the last call brought).
#
# The next session resumes from this one's file into a folder of its own, carrying nothing (a fresh checkout; the
# autotuning choices travel in reports/h200/inductor-autotune.txz):
#
#   S=reports/h200/session18 FROM=reports/h200/session17/tune-resnet50/results.json \
#       bash reports/h200/session17/run.sh 560 1 1300
set -u
S=${S:-reports/h200/session17}
FROM=${FROM:-reports/h200/session15/tune-resnet50/results.json}
mkdir -p "$S"
END=$(($(date +%s) + ${1:-560}))
. reports/h200/lib.sh
R=tests/gpu/tune-resnet50.toml
case "${2:-1}" in
1)
    probe_env
    if [ ! -f "$S/tune-resnet50/results.json" ]; then
        mkdir -p "$S/tune-resnet50"
        cp "$FROM" "$S/tune-resnet50/"
    fi
    tune_bg 0 $R tune-resnet50 "${3:-1300}"
    wait_bg tune-resnet50
    finish "$(basename "$S")" nocache
    ;;
2)
    wait_bg tune-resnet50
    finish "$(basename "$S")" nocache
    ;;
3)
    wait_bg tune-resnet50
    # the winner against a plain loop, when the tune is done and there is time for it
    kill -0 "$(cat "$B/tune-resnet50.pid")" 2>/dev/null || selfcheck 0 tune-resnet50
    finish "$(basename "$S")"
    ;;
esac
