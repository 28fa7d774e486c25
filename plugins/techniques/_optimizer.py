"""Rebuilding a step's optimizer, for the techniques that replace its parameters or its implementation.

A technique that swaps a model's ``Parameter`` objects (FSDP2's sharded ones, torchao's FP8 weight
wrappers, FP32 masters) leaves the workload's optimizer updating the old ones: training would go on
with weights that never change. These helpers build the same optimizer class, groups and
hyperparameters over the parameters the model has now.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["by_name", "parameter_names", "rebuilt_optimizer"]


def rebuilt_optimizer(
    old: torch.optim.Optimizer,
    replace: Callable[[nn.Parameter], nn.Parameter] | None = None,
    **overrides: Any,
) -> Any:
    """``type(old)`` over ``replace(p)`` for each of its parameters, its groups' settings kept and
    ``overrides`` set in every group and in the constructor's defaults (``fused=True``, say)."""
    cls = type(old)
    swap = replace or (lambda p: p)
    groups = [{**g, **overrides, "params": [swap(p) for p in g["params"]]} for g in old.param_groups]
    # Only what the constructor takes: AdamW keeps decoupled_weight_decay in its defaults but fixes it.
    accepted = inspect.signature(cls.__init__).parameters
    defaults = {k: v for k, v in {**old.defaults, **overrides}.items() if k in accepted}
    return cls(groups, **defaults)


def parameter_names(model: nn.Module) -> dict[int, str]:
    """Each parameter's qualified name, by the identity of its ``Parameter`` object."""
    return {id(p): name for name, p in model.named_parameters()}


def by_name(model: nn.Module, names: Mapping[int, str]) -> Callable[[nn.Parameter], nn.Parameter]:
    """Maps a parameter taken before a swap (named in ``names``) to the model's parameter of that name now;
    one the model never had is kept."""
    params = dict(model.named_parameters())

    def now(p: nn.Parameter) -> nn.Parameter:
        name = names.get(id(p))
        return p if name is None else params[name]

    return now
