#!/usr/bin/env bash
# Session 25 (issue 15): the ResNet-50 tune resumed from session 20's file under session 25's rule for near misses
# (a gain under the 1% floor kept when three screens of it each beat three of what it would replace, taken one after
# another on one machine), with the compiled-graphs probe's new compile-time breakdown in every compiled record, on
# one nvidia-h200:
#
#   bash reports/h200/session25/run.sh SECONDS [last]      run(timeout_s=600), the same command every call
#
# For the next resume: S=reports/h200/sessionN FROM=reports/h200/session25/tune-resnet50/results.json BUDGET=1650
# bash reports/h200/session25/run.sh SECONDS [last] (FROM: the file to resume, BUDGET: the tune's --budget in s).
#
# The first call copies session 20's results into the background run's folder and starts `ampsuite tune --resume
# --budget 6000s` there (reports/h200/session25/replay.py: the search needs ~5,400 s to reach `stack`, more than a
# session's 1,800 s; each cell is in the file the moment it is measured, and a verdict on a near miss too). Every call
# waits for it and sends back what it wrote; `last` ends it first with SIGTERM, so that its summary is written (an
# interrupted tune keeps its search), and sends back inductor's autotuning choices.
set -u
S=${S:-reports/h200/session25}
mkdir -p "$S"
END=$(($(date +%s) + ${1:-560}))
. reports/h200/lib.sh
if [ ! -f "$B/env-done" ]; then
    probe_env
    python3 -c "import torch._inductor.config as c; print('inductor compile_threads', c.compile_threads)" \
        >>"$S/env-versions.txt" 2>&1
    nproc >>"$S/env-versions.txt"
    touch "$B/env-done"
fi
if [ ! -f "$B/tune-resnet50/results.json" ]; then
    mkdir -p "$B/tune-resnet50"
    cp "${FROM:-reports/h200/session20/tune-resnet50/results.json}" "$B/tune-resnet50/results.json"
fi
tune_bg 0 tests/gpu/tune-resnet50.toml tune-resnet50 "${BUDGET:-6000}"
if [ "${2:-}" = last ]; then
    END=$((END - 45))  # the tune's summary and the cache's parts need the last seconds
    wait_bg tune-resnet50
    kill -TERM "$(cat "$B/tune-resnet50.pid")" 2>/dev/null
    for _ in $(seq 30); do kill -0 "$(cat "$B/tune-resnet50.pid")" 2>/dev/null || break; sleep 1; done
    END=$((END + 45))
    wait_bg tune-resnet50
    finish "$(basename "$S")"
else
    wait_bg tune-resnet50
    finish "$(basename "$S")" nocache
fi
