"""Automatic mixed precision: autocast to float16 (with loss scaling) or bfloat16.

The techniques only set ``step.autocast_dtype`` and ``step.scaler``; the
standard phases of :class:`ampsuite.TrainStep` already run the forward pass under
autocast and route backward and the optimizer step through the scaler, and the
core reads the scale after every numerics step (scale history, skipped steps).

float16 has a narrow exponent range: small gradients flush to zero unless the
loss is scaled up first, which is what the ``GradScaler`` does (``scaler=false``
turns it off so a suite can show what scaling buys). bfloat16 keeps float32's
exponent range, so it needs no scaler.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ampsuite import Technique, hookimpl
from ampsuite.plugins.techniques.variants import Variant, variants


@dataclass(frozen=True)
class Fp16Options:
    """Options of ``amp-fp16``; the scaler ones mirror ``torch.amp.GradScaler``'s arguments."""

    scaler: bool = field(
        default=True, metadata={"help": "scale the loss with a GradScaler (false: plain fp16 autocast)"}
    )
    init_scale: float = field(default=65536.0, metadata={"help": "initial loss scale", "gt": 0})
    growth_factor: float = field(
        default=2.0, metadata={"help": "scale multiplier after growth_interval clean steps", "gt": 1}
    )
    backoff_factor: float = field(
        default=0.5, metadata={"help": "scale multiplier after a step with inf/NaN gradients", "gt": 0, "lt": 1}
    )
    growth_interval: int = field(default=2000, metadata={"help": "clean steps before the scale grows", "ge": 1})


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return variants(
        "ampsuite.plugins.techniques._amp",
        Variant(
            "amp-fp16",
            "fp16",
            "autocast to float16 with GradScaler loss scaling (scaler=false to turn scaling off)",
            Fp16Options,
        ),
        Variant("amp-bf16", "bf16", "autocast to bfloat16; float32's exponent range, so no loss scaling"),
        order=30,
    )
