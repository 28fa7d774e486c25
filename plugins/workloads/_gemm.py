"""The torch-dependent part of :mod:`plugins.workloads.gemm` (imported when a cell builds or applies it)."""

from __future__ import annotations

import torch

from plugins.workloads.gemm import FP8_DTYPES, FP8_MIN_CAPABILITY, GemmOptions
from suite import Batch, BuildContext, SkipCell, TrainStep


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
    dtype: torch.dtype = getattr(torch, options.dtype)
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
