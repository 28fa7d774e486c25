#!/usr/bin/env bash
# Session 26 (issue 15): the ResNet-50 tune resumed from session 25's file (its confirmed stem-pad verdict included)
# with a budget the session's device time can give it, then, once it has a winner, that winner against a plain loop
# (selfcheck), on one nvidia-h200:
#
#   BUDGET=SECONDS bash reports/h200/session26/run.sh CALL_SECONDS [last]      the same command every call
#
# Session 25's replay (PYTHONPATH=. python3 reports/h200/session25/replay.py 1500 120
# reports/h200/session25/tune-resnet50/results.json) finishes this resume in ~1,310 s of a 1,500 s budget with
# half-weights + persistent-batch-norm on the path; 1,650 s would add combo_kernels (1,530 s), more than three calls
# of one 30-minute lease leave to a background run. The first call starts `ampsuite tune --resume --budget BUDGET`
# in the background (reports/h200/lib.sh: bg); every call waits for it and sends back what it wrote. A call that
# finds the tune ended checks its winner once; `last` ends an unfinished tune with SIGTERM first (its summary is
# written, its search kept for --resume) and sends back inductor's autotuning choices.
set -u
S=reports/h200/session26
mkdir -p "$S"
END=$(($(date +%s) + ${1:-500}))
. reports/h200/lib.sh
if [ ! -f "$B/env-done" ]; then
    probe_env
    nproc >>"$S/env-versions.txt"
    touch "$B/env-done"
fi
if [ ! -f "$B/tune-resnet50/results.json" ]; then
    mkdir -p "$B/tune-resnet50"
    cp reports/h200/session25/tune-resnet50/results.json "$B/tune-resnet50/results.json"
fi
# once: a tune that ended by its budget is not started again by a later call
[ -f "$B/tune-resnet50.pid" ] || tune_bg 0 tests/gpu/tune-resnet50.toml tune-resnet50 "${BUDGET:-1500}"
if [ "${2:-}" = last ]; then
    END=$((END - 45))  # the tune's summary and the cache's parts need the last seconds
    wait_bg tune-resnet50
    kill -TERM "$(cat "$B/tune-resnet50.pid")" 2>/dev/null
    for _ in $(seq 30); do kill -0 "$(cat "$B/tune-resnet50.pid")" 2>/dev/null || break; sleep 1; done
    END=$((END + 45))
    wait_bg tune-resnet50
else
    wait_bg tune-resnet50
fi
# the tune ended by itself (its budget) and its winner is not checked yet: a compile of the winner's graph is in
# inductor's cache here, so the plain loop's run costs its measurement and little more
if ! kill -0 "$(cat "$B/tune-resnet50.pid")" 2>/dev/null && [ ! -f "$B/selfcheck-done" ] && enough 150; then
    selfcheck 0 tune-resnet50 && touch "$B/selfcheck-done"
fi
if [ "${2:-}" = last ]; then finish "$(basename "$S")"; else finish "$(basename "$S")" nocache; fi
