"""Automatic mixed precision: autocast to float16 (with loss scaling) or bfloat16.

The techniques only set ``step.autocast_dtype`` and ``step.scaler``; the
standard phases of :class:`suite.TrainStep` already run the forward pass under
autocast and route backward and the optimizer step through the scaler, and the
core reads the scale after every numerics step (scale history, skipped steps).

float16 has a narrow exponent range: small gradients flush to zero unless the
loss is scaled up first, which is what the ``GradScaler`` does (``scaler=false``
turns it off so a suite can show what scaling buys). bfloat16 keeps float32's
exponent range, so it needs no scaler.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from suite import NoOptions, Technique, TrainStep, hookimpl


@dataclass(frozen=True)
class Fp16Options:
    """Options of ``amp-fp16``; the scaler ones mirror ``torch.amp.GradScaler``'s arguments."""

    scaler: bool = field(
        default=True, metadata={"help": "scale the loss with a GradScaler (false: plain fp16 autocast)"}
    )
    init_scale: float = field(default=65536.0, metadata={"help": "initial loss scale"})
    growth_factor: float = field(default=2.0, metadata={"help": "scale multiplier after growth_interval clean steps"})
    backoff_factor: float = field(
        default=0.5, metadata={"help": "scale multiplier after a step with inf/NaN gradients"}
    )
    growth_interval: int = field(default=2000, metadata={"help": "clean steps before the scale grows"})

    def __post_init__(self) -> None:
        if not self.init_scale > 0:
            raise ValueError(f"init_scale must be > 0, got {self.init_scale!r}")
        if not self.growth_factor > 1:
            raise ValueError(f"growth_factor must be > 1, got {self.growth_factor!r}")
        if not 0 < self.backoff_factor < 1:
            raise ValueError(f"backoff_factor must be in (0, 1), got {self.backoff_factor!r}")
        if self.growth_interval < 1:
            raise ValueError(f"growth_interval must be >= 1, got {self.growth_interval!r}")


def _impl() -> ModuleType:
    # The torch-dependent part lives in plugins.techniques._amp: registering this plugin (ampsuite list,
    # --help, suite-file checks) must not import torch.
    return importlib.import_module("plugins.techniques._amp")


def apply_fp16(step: TrainStep, options: Fp16Options) -> TrainStep:
    return _impl().apply_fp16(step, options)


def apply_bf16(step: TrainStep, options: NoOptions) -> TrainStep:
    return _impl().apply_bf16(step, options)


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="amp-fp16",
            summary="autocast to float16 with GradScaler loss scaling (scaler=false to turn scaling off)",
            apply=apply_fp16,
            options=Fp16Options,
            order=30,
            conflicts=frozenset({"amp-bf16"}),
        ),
        Technique(
            name="amp-bf16",
            summary="autocast to bfloat16; float32's exponent range, so no loss scaling",
            apply=apply_bf16,
            order=30,
            conflicts=frozenset({"amp-fp16"}),
        ),
    ]


def __getattr__(name: str) -> Any:
    """Everything else of the plugin (models, datasets) from its implementation module."""
    if name.startswith(("__", "AMPSUITE_", "ampsuite_")):  # the manager's and pluggy's probes stay here
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_impl(), name)
