#!/usr/bin/env bash
# Session 19 (issue 15): ResNet-50's fastest measured combination (session 18's o2 + combo_kernels) against the
# same with inductor settings aimed at its batch norm kernels, on one nvidia-h200
# (tests/gpu/resnet50-knobs.toml, kernels probe on):
#
#   bash reports/h200/session19/run.sh SECONDS CALL      run(timeout_s=600, carry=[".gpu"]), calls 1-3 back to back
#
# Call 1 starts the suite in a process session of its own (run_bg), which runs on across calls 2 and 3 while the
# machine is held; each call sends back what it wrote so far, call 3 with inductor's cache and autotuning
# choices. .gpu/ carries session 18's inductor cache, so the o2-combo and o1 cells compile from it.
#
# What ran: calls 1-3 (525, 516 and 164 s) measured the six cells into resnet50-knobs/; call 4 on the still-held
# machine ran `run 0 tests/gpu/resnet50-knobs.toml resnet50-knobs-repeat -k "not aggressive and not mixsplit"
# -p plugins.probes.kernels` (lib.sh's run, 192 s); call 5, on a fresh machine with only the o2-combo entries of
# inductor's cache carried in .gpu/ (fxgraph/ty*, fxgraph/fq*, 4.6 MB xz), ran
# `python3 -m suite selfcheck --device cuda --cells $S/resnet50-knobs-repeat/results.json -k o2-combo/ --rounds 3`
# (57 s). 1,673 s of device time in all.
set -u
S=${S:-reports/h200/session19}
mkdir -p "$S"
END=$(($(date +%s) + ${1:-560}))
. reports/h200/lib.sh
N=resnet50-knobs
case "${2:-1}" in
1)
    probe_env
    python3 -c "import torch._inductor.config as c; print('inductor: aggressive_fusion', hasattr(c, 'aggressive_fusion'), 'triton.mix_order_reduction_autotune_split_size', hasattr(c.triton, 'mix_order_reduction_autotune_split_size'))" >>"$S/env-versions.txt" 2>&1
    run_bg 0 tests/gpu/resnet50-knobs.toml $N -p plugins.probes.kernels
    wait_bg $N
    finish "$(basename "$S")" nocache
    ;;
2)
    wait_bg $N
    finish "$(basename "$S")" nocache
    ;;
3)
    wait_bg $N
    finish "$(basename "$S")"
    ;;
esac
