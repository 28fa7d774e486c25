"""An example third-party plugin: one workload (a linear regression) and one technique.

It is what a plugin author writes: records built on the public ``suite`` API
only, registered through the ``ampsuite`` entry-point group.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ampsuite import Batch, BuildContext, Technique, TrainStep, Workload, hookimpl

__version__ = "1.2.3"
AMPSUITE_PLUGIN_API = 1


@dataclass(frozen=True)
class RegressionOptions:
    features: int = field(default=7, metadata={"help": "input features of the regression"})

    def __post_init__(self) -> None:
        if self.features < 1:
            raise ValueError(f"features must be >= 1, got {self.features}")


def build(options: RegressionOptions, ctx: BuildContext) -> TrainStep:
    gen = torch.Generator().manual_seed(ctx.seed)
    x = torch.randn(ctx.batch_size, options.features, generator=gen).to(ctx.device)
    y = torch.randn(ctx.batch_size, 1, generator=gen).to(ctx.device)
    model = nn.Linear(options.features, 1).to(ctx.device)
    return TrainStep(
        device=ctx.device,
        batch_size=ctx.batch_size,
        samples_per_step=ctx.batch_size,
        data=lambda: Batch((x,), y),
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
        loss_fn=nn.MSELoss(),
    )


def mark(step: TrainStep, options: object) -> TrainStep:
    step.notes["example"] = True
    return step


@hookimpl
def ampsuite_workloads() -> list[Workload]:
    return [
        Workload(
            name="example-regression",
            summary="linear regression from the example plugin",
            build=build,
            options=RegressionOptions,
            unit="rows",
        )
    ]


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [Technique(name="example-mark", summary="marks the step's notes", apply=mark)]
