"""The numerics phase of a cell: the first steps from the seeded start, every loss read.

It is also where a step's phases first run, so it checks what they return: a
phase that gives no loss tensor is the plugin's fault, named as such
(:class:`ampsuite.contract.errors.PluginContractError`), not an AttributeError deep in here.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from typing import Any

import torch

from ampsuite.contract.errors import PluginContractError
from ampsuite.contract.step import TrainStep

__all__ = ["SCALE_COLLAPSE_FACTOR", "SCALE_FLOOR", "finite", "run_numerics", "scale_collapsed", "sync"]

SCALE_FLOOR = 1.0
SCALE_COLLAPSE_FACTOR = 2.0**10


def finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _grads_finite(step: TrainStep) -> bool:
    if step.model is None:
        return True
    grads = [p.grad for p in step.model.parameters() if p.grad is not None]
    return all(bool(torch.isfinite(g).all()) for g in grads)


def scale_collapsed(scale: float, start: float | None) -> bool:
    """Whether a GradScaler's scale has collapsed: below 1.0, or 2**10 below where it started.

    Each step with inf/NaN gradients halves the scale (by default); ten halvings
    in a row, or a scale that no longer amplifies at all, mean the gradients
    overflow whatever the scale, and fp16 training is lost.
    """
    return scale < SCALE_FLOOR or (start is not None and scale <= start / SCALE_COLLAPSE_FACTOR)


def _loss(value: Any, plugin: str, phase: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise PluginContractError(plugin, f"step phase {phase}", "a loss tensor (torch.Tensor)", value)
    return value


def run_numerics(
    step: TrainStep, run: Callable[..., torch.Tensor], n: int, metrics: dict[str, Any], plugin: str
) -> dict[str, Any]:
    """Run the first ``n`` steps from the seeded start and read every loss.

    The first call is timed on its own: compilation and graph capture happen
    there and must never leak into step time. Gradients are checked between
    the phases when the step is eager (no wrappers), where they are reachable.

    :param plugin: who made the step (the workload and its techniques), named when a phase
        breaks its contract.
    """
    losses: list[float | None] = []
    scaler = step.scaler
    start_scale = float(scaler.get_scale()) if scaler is not None else None
    # The scale before the first step leads the history, so that a skip in the
    # very first step shows as a decrease like any other.
    scales: list[float] | None = [start_scale] if start_scale is not None else None
    collapsed_step: int | None = None
    collapsed_scale: float | None = None
    nonfinite_step: int | None = None
    nonfinite_what: str | None = None
    eager = not step.wrappers
    forward_backward, update = step.phases()
    for i in range(n):
        t0 = time.perf_counter()
        batch = step.data()
        if eager:
            loss = _loss(forward_backward(batch), plugin, "forward_backward")
            grads_ok = step.scaler is not None or _grads_finite(step)
            update()
        else:
            loss = _loss(run(batch), plugin, "composed step")
            grads_ok = True
        value = float(loss.float().mean())
        if i == 0:
            sync(step.device)
            metrics["first_step_seconds"] = time.perf_counter() - t0
        losses.append(finite(value))
        if nonfinite_step is None and not math.isfinite(value):
            nonfinite_step, nonfinite_what = i, "loss"
        elif nonfinite_step is None and not grads_ok:
            nonfinite_step, nonfinite_what = i, "gradients"
        if scaler is not None and scales is not None:
            scales.append(float(scaler.get_scale()))
            if collapsed_step is None and scale_collapsed(scales[-1], start_scale):
                collapsed_step, collapsed_scale = i, scales[-1]
    skipped = None
    if scales is not None:
        skipped = sum(1 for a, b in itertools.pairwise(scales) if b < a)
    return {
        "losses": losses,
        "loss_at_n": losses[-1] if losses else None,
        "nonfinite_step": nonfinite_step,
        "nonfinite_what": nonfinite_what,
        "scale_history": scales,
        "skipped_steps": skipped,
        "scale_start": start_scale,
        "scale_collapsed_step": collapsed_step,
        "scale_at_collapse": collapsed_scale,
    }
