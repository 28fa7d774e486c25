"""The torch-dependent half of :mod:`ampsuite.plugins.workloads.optimizers`: the optimizers themselves, and the
step of a model workload trained by one.

SGD (momentum 0.9), AdamW, and LAMB from ``timm.optim.Lamb`` (``pip install 'ampsuite[lamb]'``),
all non-fused, so that ``fused-optimizer`` has something to change.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import torch
from torch import nn

from ampsuite import BuildContext, TrainStep
from ampsuite.plugins.workloads.optimizers import LAMB_HINT

__all__ = ["make_optimizer", "model_step", "trained_step"]


class Trained(Protocol):
    """Options that name an optimizer and its settings (:mod:`ampsuite.plugins.workloads.fields`)."""

    @property
    def optimizer(self) -> str: ...
    @property
    def lr(self) -> float: ...
    @property
    def weight_decay(self) -> float: ...


def make_optimizer(
    name: str, params: Iterable[torch.nn.Parameter], lr: float, weight_decay: float
) -> torch.optim.Optimizer:
    """The named optimizer over ``params`` (non-fused, so ``fused-optimizer`` has something to change)."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=False)
    if name == "lamb":
        try:
            from timm.optim import Lamb
        except ImportError as exc:  # check_optimizer skips such cells before they run
            raise RuntimeError(LAMB_HINT) from exc
        optimizer: torch.optim.Optimizer = Lamb(params, lr=lr, weight_decay=weight_decay)
        return optimizer
    raise ValueError(f"unknown optimizer {name!r}")  # OptimizerName lets no other name through build_options


def trained_step(ctx: BuildContext, options: Trained, model: nn.Module, **parts: Any) -> TrainStep:
    """:func:`model_step` with the optimizer its options name (ResNet, BERT, ViT)."""
    optimizer = make_optimizer(options.optimizer, model.parameters(), options.lr, options.weight_decay)
    return model_step(ctx, model=model, optimizer=optimizer, **parts)


def model_step(ctx: BuildContext, **parts: Any) -> TrainStep:
    """The step of a built-in model workload, one sample per batch item; ``parts`` are the step's own fields
    (``model``, ``optimizer``, ``loss_fn``, ``data``, and ``dataset`` with ``collate`` for the loading techniques)."""
    return TrainStep(device=ctx.device, batch_size=ctx.batch_size, samples_per_step=ctx.batch_size, **parts)
