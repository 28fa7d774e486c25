"""Raw matrix products: the ceiling that every other workload is measured against.

One step is one product ``(batch x) m x k @ k x n`` (``torch.mm``, or
``torch.bmm`` when ``batch > 1``) under the step's autocast, so the precision
techniques apply to it as to a model: float32 inputs with the tf32 technique
give TF32, with an amp technique the product runs in float16/bfloat16 (the
casts are part of the step, as they are in a model). ``dtype`` stores the
inputs in a 16-bit type directly, for the bare kernel rate.

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

from suite import Batch, BuildContext, TrainStep, Workload, hookimpl

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class GemmOptions:
    m: int = field(default=8192, metadata={"help": "rows of the left operand and of the product"})
    n: int = field(default=8192, metadata={"help": "columns of the right operand and of the product"})
    k: int = field(default=8192, metadata={"help": "the inner (reduced) dimension"})
    batch: int = field(default=1, metadata={"help": "independent products per step (1: torch.mm, more: torch.bmm)"})
    dtype: Literal["float32", "float16", "bfloat16"] = field(
        default="float32", metadata={"help": "storage dtype of the operands"}
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


def _operand(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    # Drawn in float32 on the host and rounded, so every dtype and device sees the same values.
    return torch.randn(shape, generator=gen).to(device=device, dtype=dtype)


def build(options: GemmOptions, ctx: BuildContext) -> TrainStep:
    torch.manual_seed(ctx.seed)
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
            # The dtype option is precision: its bfloat16 cells are compared with its float32 cell.
            precision_option="dtype",
        )
    ]
