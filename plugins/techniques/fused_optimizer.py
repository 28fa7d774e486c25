"""Fused optimizer: the same optimizer, stepping all parameters in a few fused kernels.

The default (foreach) implementations launch several kernels per parameter
group and operation; ``fused=True`` does the whole update in one kernel per
dtype/device bucket, which matters when launches dominate (small batches,
many parameters). The optimizer is rebuilt as the same class with the same
parameter groups and hyperparameters, only ``fused`` changed, so the training
trajectory is the same up to floating-point rounding.

It applies before ``cuda-graphs`` (order 50 < 90), whose capture then records
the fused kernel.

With ``amp-fp16``'s loss scaler, a fused optimizer takes the scale and the
inf check on the device (``_step_supports_amp_scaling``), so the step never
waits for the host. Fused SGD with momentum does not honour a skipped step in
torch 2.11: the overflow steps a dynamic loss scale starts with leave its
momentum buffer corrupted and the weights blow up a step later (issue 15's
ResNet-50 cell, non-finite at step 3 with the scale down to 6e-5;
LibreYOLO/libreyolo#771 reports the same). ampsuite runs such a cell as
declared; its numerics verdict says non-finite, and neither the report nor
``ampsuite tune`` ever crowns it. Fused Adam and AdamW honour the skip.
"""

from __future__ import annotations

import inspect
from typing import Any

from suite import NoOptions, SkipCell, Technique, TrainStep, hookimpl

__all__ = ["apply"]


def apply(step: TrainStep, options: NoOptions) -> TrainStep:
    old = step.optimizer
    if old is None:
        raise SkipCell("fused-optimizer needs a workload with an optimizer")
    cls = type(old)
    if "fused" not in old.defaults:
        raise SkipCell(f"fused-optimizer: {cls.__name__} has no fused implementation")
    groups: list[dict[str, Any]] = [{**group, "fused": True, "foreach": None} for group in old.param_groups]
    # Only what the constructor takes (AdamW keeps decoupled_weight_decay in its
    # defaults but fixes it); every hyperparameter also travels in the groups.
    accepted = inspect.signature(cls.__init__).parameters
    defaults = {k: v for k, v in old.defaults.items() if k in accepted and k not in ("fused", "foreach")}
    try:
        new = cls(groups, **{**defaults, "fused": True, "foreach": None})
    except (RuntimeError, ValueError, TypeError) as exc:
        raise SkipCell(f"fused-optimizer: fused {cls.__name__} is not supported here: {exc}") from exc
    if old.state:
        new.load_state_dict(old.state_dict())
    step.optimizer = new
    step.notes["fused_optimizer"] = {"class": cls.__name__, "fused": True}
    return step


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="fused-optimizer",
            summary="rebuild the optimizer with fused=True (one kernel per update instead of many)",
            apply=apply,
            order=50,
        )
    ]
