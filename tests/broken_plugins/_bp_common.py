"""A real (tiny) build function shared by the duplicate-name plugins."""

from __future__ import annotations

import torch
from torch import nn

from ampsuite import Batch, BuildContext, NoOptions, TrainStep


def build(options: NoOptions, ctx: BuildContext) -> TrainStep:
    model = nn.Linear(4, 1).to(ctx.device)
    x = torch.randn(ctx.batch_size, 4, device=ctx.device)
    y = torch.randn(ctx.batch_size, 1, device=ctx.device)
    return TrainStep(
        device=ctx.device,
        batch_size=ctx.batch_size,
        samples_per_step=ctx.batch_size,
        data=lambda: Batch((x,), y),
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.MSELoss(),
    )
