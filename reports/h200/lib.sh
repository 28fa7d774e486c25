# Helpers the per-session H200 drivers share (reports/h200/sessionN/run.sh sources this).
#
# Before sourcing: S (the session's folder under reports/h200) and END (epoch seconds by which
# the call must be done). After it: left, run, tune, bg, tune_bg, run_bg, wait_bg, selfcheck, probe_env, finish.
# in the checkout, ignored: a machine still held from the previous call keeps it (the device tool keeps
# ignored files between calls), so a graph compiled there is a cache hit in the next call
export TORCHINDUCTOR_CACHE_DIR=$PWD/.inductor PYTHONUNBUFFERED=1
mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
# inductor's caches of earlier calls, carried as .gpu/kernels or as the parts finish sent back
# (.gpu/inductor.txz.partNN): a compile found there takes seconds. Only into an empty cache (a machine's
# first call): a later call would write the same files again under a background run that reads them.
#
# A session's checkout is fresh, and .gpu/ is gone with the last one: what is left of inductor's cache is its
# autotuning choices (reports/h200/inductor-autotune.txz, 67 KB since session 18: the `.best_config` beside each Triton
# kernel, which finish sends back as autotune.txz). A kernel whose choice is there is compiled in that one config
# instead of in each it would be timed in (session 17: 1,870 cubins for 402 kernels). Session 18's first compile with
# them took 199.7 s against session 17's 265 s cold for a like graph (not the same one: stem-pad differs).
if [ -z "$(ls -A "$TORCHINDUCTOR_CACHE_DIR")" ]; then
    [ -f reports/h200/inductor-autotune.txz ] && tar -xJf reports/h200/inductor-autotune.txz -C "$TORCHINDUCTOR_CACHE_DIR"
    [ -d .gpu/kernels ] && cp -r .gpu/kernels/. "$TORCHINDUCTOR_CACHE_DIR/"
    ls .gpu/inductor.txz.part* >/dev/null 2>&1 && cat .gpu/inductor.txz.part* | tar -xJf - -C "$TORCHINDUCTOR_CACHE_DIR"
fi

# ignored too, and kept between the calls of one held machine: a background run writes its results here, since
# each call copies this checkout's tracked and untracked files again, over a results file under $S
B=$PWD/.h200
mkdir -p "$B"

left() { echo $((END - $(date +%s))); }
# enough GPU time left for a step: a helper started with less (a negative timeout) would only fail
enough() { [ "$(left)" -gt "${1:-60}" ]; }

# run GPU SUITE NAME [ARGS...]: `ampsuite run SUITE` on one GPU into $S/NAME/, resumable, ended in time
run() {
    local gpu=$1 suite=$2 name=$3
    shift 3
    enough || return 1
    echo "== $(date -u +%T) run $name on GPU $gpu" >>"$S/$name.log"
    CUDA_VISIBLE_DEVICES=$gpu timeout -s INT $(($(left) - 10)) python3 -m suite run "$suite" \
        --no-peaks --resume -o "$S/$name/results.json" --report-dir "$S/$name" "$@" >>"$S/$name.log" 2>&1
}

# tune GPU SUITE NAME [ARGS...]: `ampsuite tune SUITE --resume` on one GPU into $S/NAME/
tune() {
    local gpu=$1 suite=$2 name=$3
    shift 3
    enough 90 || return 1
    echo "== $(date -u +%T) tune $name on GPU $gpu" >>"$S/$name.log"
    CUDA_VISIBLE_DEVICES=$gpu timeout -s INT $(($(left) - 10)) python3 -m suite tune "$suite" \
        --resume --budget $(($(left) - 40))s --report-dir "$S/$name" "$@" >>"$S/$name.log" 2>&1
}

# bg GPU NAME COMMAND [ARGS...]: `python3 -m suite COMMAND ARGS...` in a process session of its own, so that it
# outlives this call (the device tool ends a call's other processes) and runs on across the next calls while the
# machine is held: one run longer than a call's 10 minutes. The machine goes back after 30 s without a call, and
# the run with it (its results file keeps every cell measured). Writes into $B/NAME/, starting from
# $S/NAME/results.json when there is one; does nothing while NAME runs.
bg() {
    local gpu=$1 name=$2
    shift 2
    if [ -f "$B/$name.pid" ] && kill -0 "$(cat "$B/$name.pid")" 2>/dev/null; then return 0; fi
    mkdir -p "$B/$name"
    [ -f "$S/$name/results.json" ] && [ ! -f "$B/$name/results.json" ] && cp "$S/$name/results.json" "$B/$name/"
    echo "== $(date -u +%T) $1 $name on GPU $gpu in the background" >>"$B/$name.log"
    CUDA_VISIBLE_DEVICES=$gpu setsid python3 -m suite "$@" >>"$B/$name.log" 2>&1 </dev/null &
    echo $! >"$B/$name.pid"
    disown  # finish's `wait` is for this call's jobs
}

# tune_bg GPU SUITE NAME SECONDS [ARGS...]: `ampsuite tune SUITE --resume --budget SECONDS` through bg
tune_bg() {
    local gpu=$1 suite=$2 name=$3 seconds=$4
    shift 4
    bg "$gpu" "$name" tune "$suite" --resume --budget "${seconds}s" --report-dir "$B/$name" "$@"
}

# run_bg GPU SUITE NAME [ARGS...]: `ampsuite run SUITE --resume` through bg, with no time limit of its own
run_bg() {
    local gpu=$1 suite=$2 name=$3
    shift 3
    bg "$gpu" "$name" run "$suite" --no-peaks --resume -o "$B/$name/results.json" --report-dir "$B/$name" "$@"
}

# wait_bg NAME: until the background run NAME ends, or this call has 40 s left; then what it wrote so far into $S
wait_bg() {
    local pid
    pid=$(cat "$B/$1.pid" 2>/dev/null) || return 1
    while kill -0 "$pid" 2>/dev/null && [ "$(left)" -gt 40 ]; do sleep 5; done
    mkdir -p "$S/$1"
    cp -r "$B/$1/." "$S/$1/"
    cp "$B/$1.log" "$S/$1.log"
}

# selfcheck GPU NAME: the winner of the tune in $S/NAME/ against a plain loop, into $S/selfcheck-NAME.json
selfcheck() {
    enough || return 1
    echo "== $(date -u +%T) selfcheck $2 on GPU $1" >>"$S/selfcheck-$2.log"
    CUDA_VISIBLE_DEVICES=$1 timeout -s INT $(($(left) - 10)) python3 -m suite selfcheck --device cuda \
        --tuned "$S/$2/results.json" -o "$S/selfcheck-$2.json" >>"$S/selfcheck-$2.log" 2>&1
}

probe_env() {
    nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm,temperature.gpu --format=csv \
        >"$S/env-$(date +%s).txt" 2>&1
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())" \
        >>"$S/env-versions.txt" 2>&1
}

# finish NAME: wait for the call's jobs and send the session's folder back through $OUT, with inductor's
# cache for the next call's .gpu/ in parts of 15 MB ($OUT takes 16 MiB a file, 8 files and 64 MiB in
# all; at most 4 parts and autotune.txz, or none; xz, as cubins and generated code shrink far more than
# with gzip). `finish NAME nocache` leaves the cache out: a call whose background run goes on would only
# send a cache it is still filling.
finish() {
    wait
    tar -czf "$OUT/$1.tgz" "$S" 2>/dev/null
    [ "${2:-}" = nocache ] && return 0
    # the autotuning choices alone, for reports/h200/inductor-autotune.txz (kept in the repository, unlike the cache)
    (cd "$TORCHINDUCTOR_CACHE_DIR" && find . -name '*.best_config' | tar -cJf "$OUT/autotune.txz" -T -)
    XZ_OPT=-T0 tar -cJf - -C "$TORCHINDUCTOR_CACHE_DIR" . 2>/dev/null | split -b 15000000 -d - /tmp/inductor.txz.part
    [ "$(ls /tmp/inductor.txz.part* | wc -l)" -le 4 ] && cp /tmp/inductor.txz.part* "$OUT/"
}
