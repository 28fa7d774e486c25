"""The torch-dependent part of :mod:`ampsuite.plugins.techniques.channels_last` (imported on first use)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ampsuite import Batch, NoOptions, SkipCell, TrainStep


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


def apply(step: TrainStep, options: NoOptions) -> TrainStep:
    if step.model is None:
        raise SkipCell("channels-last needs a workload with a model")
    step.model.to(memory_format=torch.channels_last)
    step.memory_format = torch.channels_last
    step.data = ChannelsLastData(step.data)
    converted = sum(1 for p in step.model.parameters() if p.dim() == 4)
    step.notes["channels_last"] = {"params_4d": converted}
    return step
