"""Raw matrix products: the ceiling that every other workload is measured against.

One step is one product ``(batch x) m x k @ k x n`` (``torch.mm``, or
``torch.bmm`` when ``batch > 1``) under the step's autocast, so the precision
techniques apply to it as to a model: float32 inputs with the tf32 technique
give TF32, with an amp technique the product runs in float16/bfloat16 (the
casts are part of the step, as they are in a model). ``dtype`` stores the
inputs in a 16-bit type directly, for the bare kernel rate.

FP8 (``dtype = "float8_e4m3fn"`` or ``"float8_e5m2"``) is timed through
``torch._scaled_mm``, the kernel FP8 training uses: both operands are
quantised once at build time with per-tensor float32 scales (amax / the
format's largest value; the step passes the inverse, dequantising, scales),
the second operand is stored column-major as the kernel requires, and the
product comes out in bfloat16. ``float8_e5m2`` is the gradient case of FP8
training, an e5m2 left operand times an e4m3 right one (cuBLAS has no e5m2 x
e5m2 product). The amp/tf32 techniques do not change an FP8 product. An FP8
cell is skipped at expansion off CUDA, for ``batch > 1`` (``_scaled_mm`` is
2-D only) and where ``k`` or ``n`` is not a multiple of 16 (``_scaled_mm``
refuses those shapes), and at build below compute capability 8.9 (Ada,
Hopper and newer have FP8 Tensor Cores). FLOPs are 2mnk per product as for
every dtype.

Inputs are allocated once and never change, so a CUDA graph can capture the
step; nothing needs gradients, there is no optimizer and ``update`` does
nothing. The step returns one element of the product as its "loss": a view,
so no host synchronisation. One element says nothing about a product's
precision, so the cell's numerics verdict comes from ``check_output``: the
product of operands drawn afresh in each process, against float64 of the same
operands, by relative error norm, within a tolerance per precision (float32,
TF32, float16/bfloat16, FP8; ``_gemm.TOLERANCES``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ampsuite import Workload, hookimpl, lazy

FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
FP8_ALIGN = 16
"""``torch._scaled_mm`` refuses a K or N that is not a multiple of 16."""
FP8_MIN_CAPABILITY = (8, 9)
"""FP8 Tensor Cores: Ada (8.9), Hopper (9.0) and newer."""


@dataclass(frozen=True)
class GemmOptions:
    m: int = field(default=8192, metadata={"help": "rows of the left operand and of the product", "ge": 1})
    n: int = field(default=8192, metadata={"help": "columns of the right operand and of the product", "ge": 1})
    k: int = field(default=8192, metadata={"help": "the inner (reduced) dimension", "ge": 1})
    batch: int = field(
        default=1, metadata={"help": "independent products per step (1: torch.mm, more: torch.bmm)", "ge": 1}
    )
    # Storage dtypes, by their torch attribute names (torch is imported only when a cell builds).
    dtype: Literal["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"] = field(
        default="float32",
        metadata={
            "help": "storage dtype of the operands; float8_* run torch._scaled_mm (CUDA, capability >= 8.9), "
            "float8_e5m2 as e5m2 x e4m3"
        },
    )

    @property
    def flops(self) -> int:
        """Floating-point operations of one step: 2 per multiply-add."""
        return 2 * self.batch * self.m * self.n * self.k


def check(options: GemmOptions, device_type: str) -> str | None:
    """Why an FP8 product cannot run here, decided at expansion (the capability is checked at build)."""
    if options.dtype not in FP8_DTYPES:
        return None
    if device_type != "cuda":
        return (
            f"{options.dtype} GEMM runs torch._scaled_mm, which needs a CUDA GPU of compute capability >= 8.9; "
            f"this run is on {device_type}"
        )
    if options.batch != 1:
        return (
            f"{options.dtype} GEMM: torch._scaled_mm multiplies 2-D operands only; batch must be 1, got {options.batch}"
        )
    bad = {name: getattr(options, name) for name in ("k", "n") if getattr(options, name) % FP8_ALIGN}
    if bad:
        what = ", ".join(f"{k}={v}" for k, v in bad.items())
        return f"{options.dtype} GEMM: torch._scaled_mm needs k and n multiples of {FP8_ALIGN}; got {what}"
    return None


@hookimpl
def ampsuite_workloads() -> list[Workload]:
    return [
        Workload(
            name="gemm",
            summary="raw (batched) matrix products in a chosen dtype; the device's own ceiling",
            build=lazy("ampsuite.plugins.workloads._gemm:build"),
            options=GemmOptions,
            unit="products",
            # The dtype option is precision: its bfloat16 cells are compared with its float32 cell.
            precision_option="dtype",
            check=check,
        )
    ]
