#!/usr/bin/env bash
# Session 24 (issue 15): ResNet-50 with every lever that measured faster, together for the first time
# (tests/gpu/resnet50-stack.toml: O2 + combo_kernels + stem-pad + maxpool-offsets + the stem's persistent batch
# norm), beside session 22's best cell (tuned-bn) on the same machine, then the stack's fidelity, on one nvidia-h200:
#
#   bash reports/h200/session24/run.sh SECONDS [last]      run(timeout_s=600), the same command every call
#
# Every call: start the cells (fp32, the baseline, first; then stack, tuned-bn, stack-cd, stack-nobn; each in its
# own process) in the background unless they run or ran on this machine, and wait for them; once they are done,
# start `ampsuite selfcheck` of the stack cell the same way. (Session 24 added stack-nobn after this driver's run
# and ran it inline, as reports/README.md says.) `last` also sends back inductor's autotuning choices (reports/h200/inductor-autotune.txz).
set -u
S=${S:-reports/h200/session24}
mkdir -p "$S"
END=$(($(date +%s) + ${1:-560}))
. reports/h200/lib.sh
[ -f "$B/env-done" ] || { probe_env; touch "$B/env-done"; }
if [ ! -f "$B/resnet50-stack.done" ]; then
    run_bg 0 tests/gpu/resnet50-stack.toml resnet50-stack
    wait_bg resnet50-stack
    kill -0 "$(cat "$B/resnet50-stack.pid")" 2>/dev/null || touch "$B/resnet50-stack.done"
fi
if [ -f "$B/resnet50-stack.done" ] && { [ -f "$B/selfcheck-stack.pid" ] || enough 120; }; then
    mkdir -p "$B/selfcheck-stack"
    bg 0 selfcheck-stack selfcheck --device cuda --cells "$B/resnet50-stack/results.json" \
        -k "stack and not cd" -o "$B/selfcheck-stack/selfcheck.json"
    wait_bg selfcheck-stack
fi
if [ "${2:-}" = last ]; then finish "$(basename "$S")"; else finish "$(basename "$S")" nocache; fi
