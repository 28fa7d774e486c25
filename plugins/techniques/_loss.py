"""A step's loss passed through a function, as a module (torch-dependent; registers nothing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class MappedLoss(nn.Module):
    """``then(inner(output, target))``: the step's loss changed once computed for the update (divided per
    micro-batch, made to overflow in backward). In eval mode, as a held-out evaluation puts it, the workload's loss
    as it is: the change belongs to training, as dropout does. A module, as ``TrainStep.loss_fn`` is, with the
    workload's loss as its submodule, so that what finds the step's modules (``fp32-islands``' ``loss``) still
    reaches it."""

    def __init__(self, inner: nn.Module, then: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.inner = inner
        self.then = then

    def forward(self, output: Any, target: Any) -> torch.Tensor:
        loss = self.inner(output, target)
        return self.then(loss) if self.training else loss
