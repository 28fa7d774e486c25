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
so no host synchronisation, and a value that the numerics phase can compare
with the FP32 baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from suite import Batch, BuildContext, SkipCell, TrainStep, Workload, hookimpl

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
}
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
FP8_ALIGN = 16
"""``torch._scaled_mm`` refuses a K or N that is not a multiple of 16."""
FP8_MIN_CAPABILITY = (8, 9)
"""FP8 Tensor Cores: Ada (8.9), Hopper (9.0) and newer."""


@dataclass(frozen=True)
class GemmOptions:
    m: int = field(default=8192, metadata={"help": "rows of the left operand and of the product"})
    n: int = field(default=8192, metadata={"help": "columns of the right operand and of the product"})
    k: int = field(default=8192, metadata={"help": "the inner (reduced) dimension"})
    batch: int = field(default=1, metadata={"help": "independent products per step (1: torch.mm, more: torch.bmm)"})
    dtype: Literal["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"] = field(
        default="float32",
        metadata={
            "help": "storage dtype of the operands; float8_* run torch._scaled_mm (CUDA, capability >= 8.9), "
            "float8_e5m2 as e5m2 x e4m3"
        },
    )

    def __post_init__(self) -> None:
        for name in ("m", "n", "k", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")

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


def _operand(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    # Drawn in float32 on the host and rounded, so every dtype and device sees the same values.
    return torch.randn(shape, generator=gen).to(device=device, dtype=dtype)


def _quantised(t: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``t`` in ``dtype`` with a per-tensor scale, and the float32 scale that dequantises it."""
    amax = t.abs().max().clamp(min=1e-12).float()
    scale = amax / torch.finfo(dtype).max  # dequantising scale: t ~= q * scale
    q = (t / scale).clamp(-torch.finfo(dtype).max, torch.finfo(dtype).max).to(dtype)
    return q, scale.reshape(())


def _build_fp8(options: GemmOptions, ctx: BuildContext) -> TrainStep:
    # Off CUDA the matrix already skipped the cell; a direct build there uses torch's CPU kernel (tests).
    if ctx.device.type == "cuda":
        capability = torch.cuda.get_device_capability(ctx.device)
        if capability < FP8_MIN_CAPABILITY:
            raise SkipCell(
                f"{options.dtype} GEMM needs FP8 Tensor Cores (compute capability >= 8.9); "
                f"{torch.cuda.get_device_name(ctx.device)} has {capability[0]}.{capability[1]}"
            )
    gen = torch.Generator().manual_seed(ctx.seed)
    # The same float32 values as every other dtype, quantised once; the step times the kernel only.
    a32 = _operand((options.m, options.k), torch.float32, ctx.device, gen)
    b32 = _operand((options.k, options.n), torch.float32, ctx.device, gen)
    left = torch.float8_e5m2 if options.dtype == "float8_e5m2" else torch.float8_e4m3fn
    a, scale_a = _quantised(a32, left)
    bt, scale_b = _quantised(b32.t().contiguous(), torch.float8_e4m3fn)
    b = bt.t()  # column-major (k, n): the layout torch._scaled_mm requires of its second operand
    del a32, b32
    batch = Batch((a, b))
    step = TrainStep(device=ctx.device, batch_size=ctx.batch_size, samples_per_step=1, data=lambda: batch)

    def forward_backward(inputs: Batch) -> torch.Tensor:
        x, y = inputs.inputs
        out = torch._scaled_mm(x, y, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
        return out.reshape(-1)[0]

    step.forward_backward = forward_backward
    step.update = _no_update
    step.notes["fp8_gemm"] = {
        "op": "torch._scaled_mm",
        "a": str(left).removeprefix("torch."),
        "b": "float8_e4m3fn",
        "scales": "per-tensor float32",
        "out_dtype": "bfloat16",
        "b_layout": "column-major",
        "bf16_reference": {"dtype": "bfloat16"},
    }
    return step


def build(options: GemmOptions, ctx: BuildContext) -> TrainStep:
    torch.manual_seed(ctx.seed)
    if options.dtype in FP8_DTYPES:
        return _build_fp8(options, ctx)
    gen = torch.Generator().manual_seed(ctx.seed)
    dtype = DTYPES[options.dtype]
    lead = (options.batch,) if options.batch > 1 else ()
    a = _operand((*lead, options.m, options.k), dtype, ctx.device, gen)
    b = _operand((*lead, options.k, options.n), dtype, ctx.device, gen)
    batch = Batch((a, b))
    product = torch.bmm if options.batch > 1 else torch.mm

    def data() -> Batch:
        return batch

    step = TrainStep(device=ctx.device, batch_size=ctx.batch_size, samples_per_step=1, data=data)

    def forward_backward(inputs: Batch) -> torch.Tensor:
        with step.autocast():
            out = product(*inputs.inputs)
        return out.reshape(-1)[0]

    step.forward_backward = forward_backward
    step.update = _no_update
    return step


def _no_update() -> None:
    """Nothing to apply: a product has no parameters."""


@hookimpl
def ampsuite_workloads() -> list[Workload]:
    return [
        Workload(
            name="gemm",
            summary="raw (batched) matrix products in a chosen dtype; the device's own ceiling",
            build=build,
            options=GemmOptions,
            unit="products",
            check=check,
        )
    ]
