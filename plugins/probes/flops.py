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

from ampsuite import Probe, hookimpl, lazy


@hookimpl
def ampsuite_probes() -> list[Probe]:
    return [
        Probe(
            name="flops",
            summary="FLOPs of one forward+backward (torch.utils.flop_counter) and the dtype class of its products",
            inspect=lazy("ampsuite.plugins.probes._flops:inspect"),
            order=40,
        )
    ]
