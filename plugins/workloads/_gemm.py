"""The torch-dependent part of :mod:`plugins.workloads.gemm` (imported when a cell builds or applies it)."""

from __future__ import annotations

import torch

from plugins.workloads.gemm import GemmOptions
from suite import Batch, BuildContext, TrainStep


def _operand(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    # Drawn in float32 on the host and rounded, so every dtype and device sees the same values.
    return torch.randn(shape, generator=gen).to(device=device, dtype=dtype)


def build(options: GemmOptions, ctx: BuildContext) -> TrainStep:
    torch.manual_seed(ctx.seed)
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
