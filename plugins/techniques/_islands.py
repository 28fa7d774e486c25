"""The torch-dependent part of :mod:`ampsuite.plugins.techniques.islands` (imported on first use)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ampsuite import SkipCell, TrainStep
from ampsuite.plugins.techniques.islands import IslandsOptions

_MARK = "_ampsuite_fp32_island"

ISLAND_TYPES: dict[str, tuple[type[nn.Module], ...]] = {
    "layernorm": (nn.LayerNorm,),
    "softmax": (nn.Softmax, nn.LogSoftmax),
    "batchnorm": (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm),
}
"""Module types per layer name; ``"loss"`` means the step's ``loss_fn``."""


def _to_fp32(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.float() if value.dtype in (torch.float16, torch.bfloat16) else value
    if isinstance(value, tuple | list):
        return type(value)(_to_fp32(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_fp32(v) for k, v in value.items()}
    return value


def island(module: nn.Module, device_type: str) -> bool:
    """Make ``module`` run in float32 with autocast off; False if it already does."""
    if getattr(module, _MARK, False):
        return False
    original: Callable[..., Any] = module.forward

    @functools.wraps(original)
    def forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=device_type, enabled=False):
            return original(*_to_fp32(args), **_to_fp32(kwargs))

    module.forward = forward
    setattr(module, _MARK, True)
    return True


def apply(step: TrainStep, options: IslandsOptions) -> TrainStep:
    if step.autocast_dtype is None:
        raise SkipCell("fp32-islands needs amp-fp16 or amp-bf16: the step does not autocast")
    counts = dict.fromkeys(options.layers, 0)
    for name in options.layers:
        if name == "loss":
            if step.loss_fn is not None:
                island(step.loss_fn, step.device.type)
                counts[name] = 1
            continue
        if step.model is None:
            continue
        for module in step.model.modules():
            if isinstance(module, ISLAND_TYPES[name]):
                island(module, step.device.type)
                counts[name] += 1
    applied = {name: n for name, n in counts.items() if n}
    missing = [name for name, n in counts.items() if not n]
    step.notes["fp32_islands"] = {"applied": applied, "missing": missing, "output_dtype": "float32"}
    if not applied:
        raise SkipCell(f"fp32-islands found none of {', '.join(options.layers)} in this workload's step")
    return step
