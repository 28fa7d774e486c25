"""Half weights with an FP32 master copy: Apex's O2 recipe, without Apex.

AMP (``amp-fp16``/``amp-bf16``, Apex's O1) keeps the weights in float32 and
casts per operation under autocast. O2 instead converts the model itself to
half precision, so weights, activations and weight gradients are half-sized,
and keeps what half precision cannot do:

* an **FP32 master copy** of every parameter, which the optimizer updates: each
  update copies the half gradients into the masters' float32 ``.grad``, steps
  the optimizer on the masters (its state is float32 too), and copies the
  masters back into the half weights. Small updates that would vanish when
  added to a half weight accumulate in the masters.
* **batch norm in FP32**: ``_BatchNorm`` modules keep float32 parameters and
  running statistics; PyTorch's batch norm takes half inputs with float32
  parameters and returns half outputs (cuDNN's mixed mode, as Apex relied on).
* **loss scaling for float16**: a ``torch.amp.GradScaler`` (dynamic scale). It
  works with the master scheme as it is: the scaled loss backpropagates through
  the half model, the half gradients (inf where they overflowed) are copied
  into the float32 master gradients, and ``scaler.step(optimizer)`` unscales
  those, skips the step on inf/NaN and updates the scale; the core reads its
  scale history like AMP's. bfloat16 has float32's range and needs no scaler.
* without masters (``master_weights = false``, bfloat16 only) the optimizer
  steps the half weights and keeps its state in half: the recipe Apex O2
  exists to avoid, there to show what the masters buy (an update below half
  a bfloat16 ulp of its weight rounds away; docs/quality.md).
* inputs: floating inputs are cast to the half dtype on the way in; the model's
  outputs are cast to float32 before the loss (Apex O2's default).

Composition: it replaces autocast, so ``amp-fp16``/``amp-bf16`` (and with them
``fp32-islands``) are refused with that reason. ``channels-last`` composes
(the conversion keeps the memory format), ``fused-optimizer`` composes (it
rebuilds the optimizer over the same FP32 masters, Apex's FusedAdam in O2),
``torch-compile`` compiles the half model, and ``cuda-graphs`` captures the
whole step with bfloat16 or forward/backward (update eager) with the float16
scaler. ``grad-accumulation`` accumulates half gradients per micro-batch and
copies them once per update. With ``inference`` the masters and the optimizer
are dropped: only the half model runs.

Memory (the figure to put beside AMP's): half weights + half gradients + FP32
masters + FP32 master gradients + optimizer state, against AMP's FP32 weights,
FP32 gradients and optimizer state, with half activations in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ampsuite import CheckContext, Technique, hookimpl, lazy

__all__ = ["HalfWeightsOptions", "check"]

AUTOCAST = ("amp-fp16", "amp-bf16")


@dataclass(frozen=True)
class HalfWeightsOptions:
    dtype: Literal["float16", "bfloat16"] = field(default="float16", metadata={"help": "float16 or bfloat16"})
    init_scale: float = field(default=65536.0, metadata={"help": "initial loss scale (float16 only)", "gt": 0})
    master_weights: bool = field(
        default=True,
        metadata={
            "help": "keep FP32 master weights (false: the optimizer steps the half weights themselves, a recipe "
            "whose small updates round away; bfloat16 only)",
            # Not a tune variant: without masters the recipe trains worse by design.
            "tune": (),
        },
    )

    def __post_init__(self) -> None:
        if not self.master_weights and self.dtype == "float16":
            raise ValueError(
                "master_weights = false needs dtype = 'bfloat16': GradScaler unscales no float16 gradients"
            )


def check(ctx: CheckContext) -> str | None:
    clash = [name for name in AUTOCAST if name in ctx.techniques]
    if clash:
        return (
            f"half-weights (O2: the model itself in half) replaces {clash[0]} (O1: autocast over FP32 weights); "
            "use one or the other"
        )
    return None


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="half-weights",
            summary="Apex O2 without Apex: the model in float16/bfloat16, FP32 master weights, batch norm in FP32",
            apply=lazy("ampsuite.plugins.techniques._half_weights:apply"),
            options=HalfWeightsOptions,
            order=30,
            check=check,
            requires_traits=frozenset({"model"}),
        )
    ]
