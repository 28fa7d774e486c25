"""The torch-dependent part of :mod:`ampsuite.plugins.workloads.toy` (imported on first use)."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from ampsuite import Batch, BuildContext, TrainStep
from ampsuite.plugins.workloads._optim import model_step
from ampsuite.plugins.workloads.toy import ToyOptions


class ToyDataset(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Deterministic random samples, identical for every cell with the same seed."""

    def __init__(self, size: int, features: int, classes: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, features, generator=gen)
        self.y = torch.randint(0, classes, (size,), generator=gen)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


def collate(item: tuple[torch.Tensor, torch.Tensor]) -> Batch:
    x, y = item
    return Batch((x,), y)


def build(options: ToyOptions, ctx: BuildContext) -> TrainStep:
    torch.manual_seed(ctx.seed)
    widths = [options.features] + [options.hidden] * options.layers
    body: list[nn.Module] = []
    for a, b in itertools.pairwise(widths):
        body += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*body, nn.Linear(widths[-1], options.classes)).to(ctx.device)
    dataset = ToyDataset(4 * ctx.batch_size, options.features, options.classes, ctx.seed)
    pool = [
        Batch((dataset.x[i : i + ctx.batch_size].to(ctx.device),), dataset.y[i : i + ctx.batch_size].to(ctx.device))
        for i in range(0, len(dataset), ctx.batch_size)
    ]
    cursor = iter(range(1 << 62))

    def data() -> Batch:
        return pool[next(cursor) % len(pool)]

    optimizer = torch.optim.SGD(model.parameters(), lr=options.lr)
    loss_fn = nn.CrossEntropyLoss()
    return model_step(
        ctx, model=model, optimizer=optimizer, data=data, loss_fn=loss_fn, dataset=dataset, collate=collate
    )
