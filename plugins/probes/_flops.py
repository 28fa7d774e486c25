"""The torch-dependent part of :mod:`ampsuite.plugins.probes.flops` (imported on first use)."""

from __future__ import annotations

from torch.utils.flop_counter import FlopCounterMode

from ampsuite import ProbeContext
from ampsuite.plugins.probes._tensorcores import EXTRA_FLOP_FORMULAS, MatmulRecorder, run_eager_step


def inspect(ctx: ProbeContext) -> None:
    counter = FlopCounterMode(display=False, custom_mapping=dict(EXTRA_FLOP_FORMULAS))
    recorder = MatmulRecorder()
    try:
        run_eager_step(ctx, counter, recorder)
    except Exception as exc:  # a probe must not void the cell's timing; the warning is the evidence
        ctx.warn(f"flops probe could not count the step: {type(exc).__name__}: {exc}")
        return
    total = counter.get_total_flops()
    ctx.metrics["flops_per_step"] = float(total)
    by_dtype = {dtype: float(flops) for dtype, flops in recorder.flops.most_common() if flops}
    if by_dtype:
        ctx.metrics["matmul_dtype"] = next(iter(by_dtype))
    by_op = {str(op): float(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    ctx.diagnostics["flops"] = {"total": float(total), "by_dtype": by_dtype, "by_op": by_op}
