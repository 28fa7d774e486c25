#!/usr/bin/env bash
# Session 13 (issue 15), on one nvidia-h200 a call.
#
#   bash reports/h200/session13/run.sh SECONDS CALL
#
# Call 1: every graph the ResNet-50 tune still needs and the tuned BERT-base and ViT-B/16 recipes compiled
# at once (warm.py), then those two recipes measured again as cells beside FP32 with the kernels probe
# (the AMP dtype fix of session 12), then the ResNet-50 tune resumed from session 12's results
# (tests/gpu/tune-resnet50.toml). The warms ran to their deadline unfinished, BERT-base's recipe was
# measured, ViT-B/16's was cut while compiling, and no time was left for the tune.
# Call 2: four warms (ResNet-50's graphs) with a load monitor, unfinished again, then the tune.
# Call 3: the tune alone, on call 2's cache carried in .gpu/: it chose its winner.
set -u
S=reports/h200/session13
END=$(($(date +%s) + ${1:-540}))
. reports/h200/lib.sh
probe_env
mkdir -p $S/tune-resnet50
[ -e $S/tune-resnet50/results.json ] || cp reports/h200/session12/tune-resnet50/results.json $S/tune-resnet50/
R=tests/gpu/tune-resnet50.toml
warm() { # warm DEADLINE_SECONDS ITEM...: warm.py's lines into $S/warm.log, its processes' logs into $S/warm-CALL/
    local until=$(($(date +%s) + $1)) dir=$S/warm-$CALL
    shift
    echo "== $(date -u +%T) warm $*" >>$S/warm.log
    # host memory, GPU memory and load while the compiles run: call 1's six warms all ran past 330 s
    (while [ "$(date +%s)" -lt "$until" ]; do
        echo "$(date -u +%T) $(free -g | awk '/Mem:/ {print "host used " $3 " GiB, available " $7 " GiB"}'), load $(cut -d' ' -f1 /proc/loadavg)," \
            "$(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader)"
        sleep 20
    done) >>$S/warm-monitor-$CALL.log 2>&1 &
    local mon=$!
    python3 $S/warm.py --deadline $until --out $dir "$@" >>$S/warm.log 2>&1
    kill $mon 2>/dev/null
    rm -f $dir/*.json.lock
}
CALL=${2:-1}
case "$CALL" in
1)
    warm 330 $R:fp16=amp-fp16+torch-compile $R:fp16-cl=amp-fp16+channels-last+torch-compile \
        $R:bf16=amp-bf16+torch-compile $R:bf16-cl=amp-bf16+channels-last+torch-compile \
        tests/gpu/bert-tuned.toml:tuned tests/gpu/vit-tuned.toml:tuned
    run 0 tests/gpu/bert-tuned.toml bert-tuned -p plugins.probes.kernels
    run 0 tests/gpu/vit-tuned.toml vit-tuned -p plugins.probes.kernels -k "fp32 or /tuned/"
    tune 0 $R tune-resnet50 -p plugins.probes.kernels
    ;;
2) # the four graphs the tune's greedy paths still need, then the tune
    warm 270 $R:fp16=amp-fp16+torch-compile $R:fp16-cl=amp-fp16+channels-last+torch-compile \
        $R:bf16=amp-bf16+torch-compile $R:bf16-cl=amp-bf16+channels-last+torch-compile
    tune 0 $R tune-resnet50 -p plugins.probes.kernels
    ;;
3) # the tune goes on, on call 2's inductor cache (carried as .gpu/inductor.txz.partNN): the parallel
    # warms of calls 1 and 2 ran past their deadlines (warm-monitor-2.log), so no warm
    tune 0 $R tune-resnet50 -p plugins.probes.kernels
    ;;
esac
finish session13
