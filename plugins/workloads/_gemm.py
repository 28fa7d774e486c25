"""The torch-dependent part of :mod:`ampsuite.plugins.workloads.gemm` (imported on first use)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from ampsuite import Batch, BuildContext, SkipCell, TrainStep
from ampsuite.plugins.workloads.gemm import FP8_DTYPES, FP8_MIN_CAPABILITY, GemmOptions


def _operand(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    # Drawn in float32 on the host and rounded, so every dtype and device sees the same values.
    return torch.randn(shape, generator=gen).to(device=device, dtype=dtype)


TOLERANCES = {
    "float32": 1e-5,
    "tf32": 2e-3,
    "float16": 1e-2,
    "bfloat16": 1e-2,
    "float8_e4m3fn": 2e-2,
    "float8_e5m2": 2e-2,
}
"""Largest ``norm(out - ref) / norm(ref)`` of a healthy product, by the precision it runs in. The reference is
float64 of the operands the kernel read, so the error is the kernel's rounding: in float32, accumulation
(~1e-6 at k = 8192); in TF32, inputs rounded to 10 mantissa bits (~4e-4); in float16/bfloat16 under autocast,
inputs and output rounded (~4e-3 for bfloat16); an FP8 product's bfloat16 output (~2e-3). Each bound leaves
room over those figures and stays an order of magnitude under what a wrong kernel gives."""


def _precision(dtype: str, step: TrainStep) -> str:
    """The precision a product of ``dtype`` operands runs in under the step's techniques."""
    if dtype != "float32":
        return dtype
    if step.autocast_dtype is not None:
        return str(step.autocast_dtype).removeprefix("torch.")
    if step.device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return "float32"


def _check(
    multiply: Callable[[Any, Any], torch.Tensor],
    operands: Callable[[torch.Generator], tuple[Any, Any]],
    reference: Callable[[Any, Any], torch.Tensor],
    dtype: str,
    step: TrainStep,
) -> Callable[[], dict[str, Any]]:
    """The step's ``check_output``: the product of freshly drawn operands (a new draw in every process, so one
    lucky input cannot pass a wrong kernel) against float64 of the same operands."""

    def check_output() -> dict[str, Any]:
        seed = int.from_bytes(os.urandom(8), "little") >> 1
        a, b = operands(torch.Generator().manual_seed(seed))
        out = multiply(a, b).double()
        ref = reference(a, b)
        error = float((out - ref).norm() / ref.norm())
        precision = _precision(dtype, step)
        del a, b, out, ref
        return {
            "rel_error": error,
            "tolerance": TOLERANCES[precision],
            "precision": precision,
            "reference": "float64",
            "norm": "frobenius",
            "seed": seed,
        }

    return check_output


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
    left = torch.float8_e5m2 if options.dtype == "float8_e5m2" else torch.float8_e4m3fn

    def operands(gen: torch.Generator) -> tuple[Any, Any]:
        # The same float32 values as every other dtype, quantised once; the step times the kernel only.
        a32 = _operand((options.m, options.k), torch.float32, ctx.device, gen)
        b32 = _operand((options.k, options.n), torch.float32, ctx.device, gen)
        a, scale_a = _quantised(a32, left)
        bt, scale_b = _quantised(b32.t().contiguous(), torch.float8_e4m3fn)
        # column-major (k, n): the layout torch._scaled_mm requires of its second operand
        return (a, scale_a), (bt.t(), scale_b)

    def multiply(x: Any, y: Any) -> torch.Tensor:
        return torch._scaled_mm(x[0], y[0], scale_a=x[1], scale_b=y[1], out_dtype=torch.bfloat16)

    def reference(x: Any, y: Any) -> torch.Tensor:
        return (x[0].double() * x[1].double()) @ (y[0].double() * y[1].double())

    (a, scale_a), (b, scale_b) = operands(torch.Generator().manual_seed(ctx.seed))
    batch = Batch((a, b))
    step = TrainStep(device=ctx.device, batch_size=ctx.batch_size, samples_per_step=1, data=lambda: batch)

    def forward_backward(inputs: Batch) -> torch.Tensor:
        x, y = inputs.inputs
        return multiply((x, scale_a), (y, scale_b)).reshape(-1)[0]

    step.forward_backward = forward_backward
    step.update = _no_update
    step.check_output = _check(multiply, operands, reference, options.dtype, step)
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
    dtype: torch.dtype = getattr(torch, options.dtype)
    lead = (options.batch,) if options.batch > 1 else ()
    product = torch.bmm if options.batch > 1 else torch.mm

    def operands(gen: torch.Generator) -> tuple[Any, Any]:
        a = _operand((*lead, options.m, options.k), dtype, ctx.device, gen)
        return a, _operand((*lead, options.k, options.n), dtype, ctx.device, gen)

    def multiply(a: Any, b: Any) -> torch.Tensor:
        with step.autocast():
            return product(a, b)

    def reference(a: Any, b: Any) -> torch.Tensor:
        # Through matmul, not the product under test: a wrong product must not be its own reference.
        return torch.matmul(a.double(), b.double())

    batch = Batch(operands(torch.Generator().manual_seed(ctx.seed)))

    def data() -> Batch:
        return batch

    step = TrainStep(device=ctx.device, batch_size=ctx.batch_size, samples_per_step=1, data=data)

    def forward_backward(inputs: Batch) -> torch.Tensor:
        return multiply(*inputs.inputs).reshape(-1)[0]

    step.forward_backward = forward_backward
    step.update = _no_update
    step.check_output = _check(multiply, operands, reference, options.dtype, step)
    return step


def _no_update() -> None:
    """Nothing to apply: a product has no parameters."""
