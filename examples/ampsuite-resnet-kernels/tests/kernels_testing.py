"""What the package's tests share: ampsuite's built-in workloads and techniques, reached by name through the
registry as any third-party package reaches them, and the training loops two models are compared with."""

from __future__ import annotations

import functools
from typing import Any

import torch
from ampsuite import Batch, BuildContext, Technique, TrainStep
from ampsuite.testing import load_plugins
from torch import nn

CPU = torch.device("cpu")


@functools.cache
def registry() -> Any:
    """The registry of ampsuite's built-ins (:func:`ampsuite.testing.load_plugins`); this package's techniques are not
    in it: its tests import their modules."""
    return load_plugins()


def technique(name: str) -> Technique:
    return registry().techniques[name]


def build(workload: str, batch_size: int = 4, **options: Any) -> TrainStep:
    """A built-in workload's step on the CPU, seed 0, with ``options``."""
    record = registry().workloads[workload]
    return record.build(record.options(**options), BuildContext(CPU, batch_size, 0, ""))


def resnet_step() -> TrainStep:
    """The built-in ``resnet`` workload in miniature: ResNet-18, 8 channels wide, 32x32 images, batch 4."""
    return build("resnet", depth=18, width=8, image_size=32, classes=10)


def toy_step() -> TrainStep:
    """The built-in ``toy`` MLP: no convolution, no batch norm, no pool."""
    return build("toy", batch_size=8, features=8, hidden=16, layers=1, classes=4)


def in_float64(step: TrainStep) -> TrainStep:
    """A built ``TrainStep`` trained in float64: its model (the same Parameter objects, so the optimizer built with
    it keeps them) and the inputs its data serves. Batch norm over a few images amplifies a float32 summation-order
    difference about tenfold a step, where float64 keeps it far below any tolerance."""
    served = step.data

    def data() -> Batch:
        batch = served()
        return Batch(tuple(t.double() for t in batch.inputs), batch.target)

    assert step.model is not None
    step.model.double()
    step.data = data
    return step


def train(model: nn.Module, inputs: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Outputs of a few SGD steps on ``(out ** 2).mean()``, and the parameters' last gradients."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    outputs = []
    for x in inputs:
        optimizer.zero_grad()
        out = model(x)
        (out.float() ** 2).mean().backward()
        optimizer.step()
        outputs.append(out.detach())
    return outputs, [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
