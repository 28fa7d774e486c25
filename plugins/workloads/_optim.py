"""The torch-dependent half of :mod:`ampsuite.plugins.workloads.optimizers`: the optimizers themselves.

SGD (momentum 0.9), AdamW, and LAMB from ``timm.optim.Lamb`` (``pip install 'ampsuite[lamb]'``),
all non-fused, so that ``fused-optimizer`` has something to change.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ampsuite.plugins.workloads.optimizers import (
    LAMB_HINT,
    OPTIMIZER_HELP,
    OPTIMIZERS,
    OptimizerName,
    check_optimizer,
    lamb_available,
    validate_optimizer,
)

__all__ = [
    "LAMB_HINT",
    "OPTIMIZERS",
    "OPTIMIZER_HELP",
    "OptimizerName",
    "check_optimizer",
    "lamb_available",
    "make_optimizer",
    "validate_optimizer",
]


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
    validate_optimizer(name)
    raise AssertionError(name)
