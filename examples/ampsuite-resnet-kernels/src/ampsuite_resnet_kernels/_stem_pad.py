"""The torch-dependent part of :mod:`ampsuite_resnet_kernels.stem_pad` (imported when a cell applies it)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from ampsuite import Batch, SkipCell, TrainStep
from torch import nn

from ampsuite_resnet_kernels.stem_pad import StemPadOptions


class PaddedImages:
    """Wraps ``step.data``: 4-D inputs of ``narrow`` channels come out with ``channels``, in the step's layout."""

    def __init__(self, data: Callable[[], Batch], step: TrainStep, narrow: int, channels: int) -> None:
        self.data = data
        self.step = step
        self.narrow = narrow
        self.channels = channels

    def pad(self, t: torch.Tensor) -> torch.Tensor:
        if t.dim() != 4 or t.shape[1] != self.narrow:
            return t
        # the layout is read at call time: channels-last, applied after this technique, sets it then
        layout = self.step.memory_format or torch.contiguous_format
        return F.pad(t, (0, 0, 0, 0, 0, self.channels - self.narrow)).contiguous(memory_format=layout)

    def __call__(self) -> Batch:
        batch = self.data()
        if any(t.dim() == 4 and t.shape[1] == self.narrow for t in batch.inputs):
            # in place, as channels-last converts: a pooled batch is padded once, the first time it is served
            batch.inputs = tuple(self.pad(t) for t in batch.inputs)
        return batch


def widen(model: nn.Module, channels: int) -> tuple[str, int]:
    """Give the model's first ``nn.Conv2d`` ``channels`` input channels (zero weights); its name and old count."""
    first = next(((name, m) for name, m in model.named_modules() if isinstance(m, nn.Conv2d)), None)
    if first is None:
        raise SkipCell("stem-pad: the model has no nn.Conv2d to pad")
    name, conv = first
    narrow = conv.in_channels
    if conv.groups != 1:
        raise SkipCell(f"stem-pad: the first convolution ({name}) is grouped ({conv.groups} groups)")
    if narrow >= channels:
        raise SkipCell(f"stem-pad: the first convolution ({name}) already has {narrow} input channels (>= {channels})")
    with torch.no_grad():
        # the same Parameter, its data replaced (as Module.to does), so the optimizer's reference stays good
        conv.weight.data = F.pad(conv.weight, (0, 0, 0, 0, 0, channels - narrow))
    conv.in_channels = channels
    return name, narrow


def apply(step: TrainStep, options: StemPadOptions) -> TrainStep:
    if step.model is None:
        raise SkipCell("stem-pad needs a workload with a model")
    name, narrow = widen(step.model, options.channels)
    step.data = PaddedImages(step.data, step, narrow, options.channels)
    step.notes["stem_pad"] = {"conv": name, "from_channels": narrow, "channels": options.channels}
    return step
