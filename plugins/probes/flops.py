"""FLOPs per step, and the precision class the step's matrix products run in.

One eager forward+backward of the cell's step runs under
``torch.utils.flop_counter.FlopCounterMode`` (2 FLOPs per multiply-add,
products and convolutions only; backward included exactly as autograd runs
it, e.g. no input gradient for a first layer; a fused attention kernel's
backward includes its recomputation of ``Q K^T``, as the counter counts it,
so it weighs 2.5x its forward where an unfused one weighs 2x). The CPU
flash-attention kernel, which the counter does not know, is counted with the
same formulas. The core turns
``flops_per_step`` into TFLOP/s with the timed median; the report divides that
by the device's measured peak for ``matmul_dtype`` to get MFU.

``matmul_dtype`` is the dtype class that carries most of the step's FLOPs,
observed (not inferred from settings) by a dispatch mode beside the counter:
``float16``/``bfloat16`` (autocast or 16-bit storage), ``tf32`` (float32 on
CUDA with TF32 allowed for that op) or ``float32``. The split itself goes to
``diagnostics["flops"]``.
"""

from __future__ import annotations

from torch.utils.flop_counter import FlopCounterMode

from plugins.probes.tensorcores import EXTRA_FLOP_FORMULAS, MatmulRecorder, run_eager_step
from suite import Probe, ProbeContext, hookimpl


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


@hookimpl
def ampsuite_probes() -> list[Probe]:
    return [
        Probe(
            name="flops",
            summary="FLOPs of one forward+backward (torch.utils.flop_counter) and the dtype class of its products",
            inspect=inspect,
            order=40,
        )
    ]
