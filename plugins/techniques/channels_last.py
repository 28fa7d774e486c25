"""channels-last: NHWC memory layout for convolutional models.

Tensor Core convolutions in cuDNN work in NHWC; with NCHW tensors every
convolution pays for layout transposes around the kernel. The model's 4-D
parameters and every 4-D input are converted to ``torch.channels_last``; the
values do not change, only the strides.

Inputs are converted inside ``data()``. A Batch already in channels-last is
passed through untouched, and converted batches are written back into the
Batch object, so a workload's fixed pool of device batches is converted once,
not on every step; batches that are new every step (a DataLoader) are
converted each time, as a user's loop would.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from suite import Batch, CheckContext, NoOptions, SkipCell, Technique, TrainStep, hookimpl

__all__ = ["ChannelsLastData", "apply", "check"]


class ChannelsLastData:
    """Wraps ``step.data``: 4-D inputs come out in channels-last layout."""

    def __init__(self, data: Callable[[], Batch]) -> None:
        self.data = data

    def __call__(self) -> Batch:
        batch = self.data()
        if any(t.dim() == 4 and not t.is_contiguous(memory_format=torch.channels_last) for t in batch.inputs):
            batch.inputs = tuple(
                t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t for t in batch.inputs
            )
        return batch


def check(ctx: CheckContext) -> str | None:
    if "conv" not in ctx.workload.traits:
        return f"needs a convolutional workload (trait 'conv'); {ctx.workload.name!r} has none"
    return None


def apply(step: TrainStep, options: NoOptions) -> TrainStep:
    if step.model is None:
        raise SkipCell("channels-last needs a workload with a model")
    step.model.to(memory_format=torch.channels_last)
    step.memory_format = torch.channels_last
    step.data = ChannelsLastData(step.data)
    converted = sum(1 for p in step.model.parameters() if p.dim() == 4)
    step.notes["channels_last"] = {"params_4d": converted}
    return step


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="channels-last",
            summary="NHWC (channels-last) layout for the model's 4-D weights and inputs",
            apply=apply,
            order=20,
            check=check,
        )
    ]
