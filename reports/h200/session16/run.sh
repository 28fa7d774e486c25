#!/usr/bin/env bash
# Session 16 (issue 15) had no device: no machine was lent. This is its plan for the next session with one,
# on one nvidia-h200, carrying .gpu (session 15's inductor cache, as finish sent it back):
#
#   bash reports/h200/session16/run.sh SECONDS CALL        run(carry=[".gpu"], timeout_s=600)
#
# The ResNet-50 tune resumed from session 15's file needs ~15 cold compiles of ~200 s (a replay with session 15's
# figures standing in for its new cells: ~3,300 s of cells), far more than one call's 10 minutes. So call 1 starts
# it in the background (tune_bg: its own process session, a 23-minute budget) and calls 2 and 3 only wait for it and
# send back what it wrote. Each call must follow the last within the machine's 30 s idle window, or the machine
# goes back and the run with it (nothing measured is lost: --resume goes on from the file the last call brought).
# Bring each call's session16.tgz back into the checkout before the next session, not between calls.
set -u
S=reports/h200/session16
END=$(($(date +%s) + ${1:-560}))
. reports/h200/lib.sh
R=tests/gpu/tune-resnet50.toml
case "${2:-1}" in
1)
    probe_env
    if [ ! -f "$S/tune-resnet50/results.json" ]; then
        mkdir -p "$S/tune-resnet50"
        cp reports/h200/session15/tune-resnet50/results.json "$S/tune-resnet50/"
    fi
    tune_bg 0 $R tune-resnet50 1380
    wait_bg tune-resnet50
    finish session16 nocache
    ;;
2)
    wait_bg tune-resnet50
    finish session16 nocache
    ;;
3)
    wait_bg tune-resnet50
    # the winner against a plain loop, when the tune is done and there is time for it
    kill -0 "$(cat "$B/tune-resnet50.pid")" 2>/dev/null || selfcheck 0 tune-resnet50
    finish session16
    ;;
esac
