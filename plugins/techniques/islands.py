"""FP32 islands: numerically sensitive layers keep computing in float32 under autocast.

Normalisations, softmax and the loss reduce over many values; in float16 or
bfloat16 their sums lose precision or overflow. autocast already promotes some
of them on CUDA (``layer_norm``, ``softmax`` and the losses are on its float32
list), but not batch norm, and on CPU none of them: an island makes the choice
explicit and the same on every device.

How: each matching module's ``forward`` is replaced, on the instance, by one
that disables autocast and casts float16/bfloat16 tensor inputs to float32.
Parameters are untouched (they stay float32). The module structure, parameter
names and ``isinstance`` checks are unchanged, so probes and ``torch.compile``
see the same model.

Output dtype: an island returns float32, as autocast's own float32-list ops do.
Consumers that autocast handles (linear, conv, matmul) cast it back down
themselves; element-wise consumers (a residual add) then run in float32, which
is the price of the island and shows up in the memory figures.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from suite import CheckContext, SkipCell, Technique, TrainStep, hookimpl

__all__ = ["ISLAND_TYPES", "IslandsOptions", "apply", "check", "island"]

ISLAND_TYPES: dict[str, tuple[type[nn.Module], ...]] = {
    "layernorm": (nn.LayerNorm,),
    "softmax": (nn.Softmax, nn.LogSoftmax),
    "batchnorm": (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm),
}
"""Module types per layer name; ``"loss"`` means the step's ``loss_fn``."""

LAYER_NAMES = (*ISLAND_TYPES, "loss")
AMP_TECHNIQUES = ("amp-fp16", "amp-bf16")
_MARK = "_ampsuite_fp32_island"


@dataclass(frozen=True)
class IslandsOptions:
    layers: tuple[str, ...] = field(
        default=LAYER_NAMES, metadata={"help": f"layer kinds kept in float32, from {', '.join(LAYER_NAMES)}"}
    )

    def __post_init__(self) -> None:
        if isinstance(self.layers, list):
            object.__setattr__(self, "layers", tuple(self.layers))
        if not self.layers:
            raise ValueError("layers must name at least one of " + ", ".join(LAYER_NAMES) + ", got []")
        unknown = [name for name in self.layers if name not in LAYER_NAMES]
        if unknown:
            raise ValueError(f"layers: unknown layer kind {unknown[0]!r}; choose from {', '.join(LAYER_NAMES)}")


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


def check(ctx: CheckContext) -> str | None:
    if not any(name in ctx.techniques for name in AMP_TECHNIQUES):
        return "needs amp-fp16 or amp-bf16 in the same combination (without autocast everything is float32 already)"
    if "model" not in ctx.workload.traits:
        # Decided here, not in apply: a dry run must say what the real run will do.
        return "needs a workload with a model (trait 'model'): there are no layers to keep in float32"
    return None


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


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="fp32-islands",
            summary="under autocast, keep layer norm, softmax, batch norm and the loss computing in float32",
            apply=apply,
            options=IslandsOptions,
            order=40,
            check=check,
        )
    ]
