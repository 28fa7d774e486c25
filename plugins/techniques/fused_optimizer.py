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
waits for the host. Fused SGD with momentum mishandles one skipped step (torch
2.11 to 2.14 at least): on its first step it allocates the momentum buffers
with ``empty_like`` and lets the kernel fill them, and a kernel told to skip
(an overflow, which a dynamic loss scale starts with) leaves them uninitialised
memory that every later step builds on. A ResNet-50 cell on an H200 went
non-finite at step 3 with the scale down to 6e-5; LibreYOLO/libreyolo#771
reports the same. This technique therefore starts fused SGD's momentum buffers
at zero: SGD's first step sets the buffer to the gradient, and a later step
from a zero buffer (``momentum * 0 + gradient``, no dampening) computes exactly
that, so the trajectory is unchanged and a skipped first step leaves zeros.
SGD with dampening keeps the first-step rule, and with it the torch behaviour.
Fused Adam and AdamW honour the skip.
"""

from __future__ import annotations

from typing import Any

from ampsuite import NoOptions, SkipCell, Technique, TrainStep, hookimpl

__all__ = ["apply"]


def apply(step: TrainStep, options: NoOptions) -> TrainStep:
    old = step.optimizer
    if old is None:
        raise SkipCell("fused-optimizer needs a workload with an optimizer")
    cls = type(old)
    if "fused" not in old.defaults:
        raise SkipCell(f"fused-optimizer: {cls.__name__} has no fused implementation")
    from ampsuite.plugins.techniques._optimizer import rebuilt_optimizer  # imports torch

    try:
        new = rebuilt_optimizer(old, fused=True, foreach=None)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise SkipCell(f"fused-optimizer: fused {cls.__name__} is not supported here: {exc}") from exc
    if old.state:
        new.load_state_dict(old.state_dict())
    zeroed = _zero_momentum(new)
    step.optimizer = new
    step.notes["fused_optimizer"] = {"class": cls.__name__, "fused": True}
    if zeroed:
        step.notes["fused_optimizer"]["momentum_buffers"] = f"{zeroed} started at zero (a skipped first step)"
    return step


def _zero_momentum(optimizer: Any) -> int:
    """Start SGD's missing momentum buffers at zero (see the module's docstring); returns how many."""
    import torch  # registering the plugin must not import torch

    if not isinstance(optimizer, torch.optim.SGD):
        return 0
    count = 0
    for group in optimizer.param_groups:
        if group["momentum"] == 0 or group["dampening"] != 0:
            continue
        for p in group["params"]:
            state = optimizer.state[p]
            if state.get("momentum_buffer") is None:
                state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                count += 1
    return count


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
