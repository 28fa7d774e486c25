"""One seed's quality run inside a worker: train to the budget, evaluating the held-out split every k steps.

It runs right after the numerics phase, whose steps are the training's first
(:func:`train` is handed their losses), and before the probes and the timed
steps, which then measure the trained model's speed as any cell's. The
training wall time runs from the numerics phase's first step, its compilation
or capture included, and leaves the evaluations out: the time-to-target of
docs/quality.md. Losses stay on the device between evaluations, so the
training steps are not synchronised one by one.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from ampsuite.contract.qualitywire import QualityCurve, QualityRun
from ampsuite.contract.step import StepFn, TrainStep
from ampsuite.run.numerics import finite, sync

__all__ = ["budget_steps", "evaluate", "train"]


def budget_steps(plan: dict[str, Any], samples_per_step: float) -> int:
    """The budget in optimizer steps: ``steps``, else ``ceil(samples / samples per step)``."""
    if int(plan.get("steps") or 0) > 0:
        return int(plan["steps"])
    return max(1, math.ceil(int(plan["samples"]) / max(samples_per_step, 1)))


def evaluate(step: TrainStep, batches: int) -> tuple[float, float | None]:
    """The mean loss over ``batches`` held-out batches, and the accuracy when the step classifies."""
    assert step.eval_data is not None and step.loss_fn is not None and step.model is not None
    model, loss_fn = step.model, step.loss_fn
    model_training, loss_training = model.training, loss_fn.training
    model.eval()
    loss_fn.eval()  # a loss a technique changed for the update (grad-accumulation's share) is the workload's here
    total = torch.zeros((), device=step.device)
    correct = torch.zeros((), device=step.device, dtype=torch.int64)
    counted = seen = 0
    try:
        with torch.no_grad():
            for batch in step.eval_data(batches):
                out = step.predict(batch)
                with step.autocast():
                    loss = loss_fn(out, batch.target)
                total += loss.float()
                seen += 1
                if step.classifies and batch.target is not None:
                    correct += (out.argmax(dim=-1).reshape(-1) == batch.target.reshape(-1)).sum()
                    counted += batch.target.numel()
    finally:
        model.train(model_training)
        loss_fn.train(loss_training)
    loss_value = float(total) / max(seen, 1)
    return loss_value, (int(correct) / counted if counted else None)


def _finite(value: float) -> bool:
    return math.isfinite(value)


def train(
    step: TrainStep,
    run: StepFn,
    plan: dict[str, Any],
    *,
    seed: int,
    first_losses: list[float | None],
    started: float,
) -> QualityRun:
    """Train ``step`` on to the budget of ``plan`` (:meth:`ampsuite.spec.quality.QualitySpec.plan`).

    :param first_losses: the numerics phase's losses: its steps are the first of the budget.
    :param started: ``time.perf_counter()`` when the first of those steps began.
    """
    every, batches, target = int(plan["eval_every"]), int(plan["eval_batches"]), plan.get("target")
    steps = budget_steps(plan, step.samples_per_step)
    curve: QualityCurve = {"steps": [], "eval_loss": [], "train_loss": [], "seconds": []}
    if step.classifies:
        curve["eval_accuracy"] = []
    carried = list(first_losses)
    done = len(carried)
    diverged = next((i + 1 for i, v in enumerate(carried) if v is None or not _finite(v)), None)
    pending = torch.zeros((), device=step.device)
    count = len(carried)
    partial = sum(v for v in carried if v is not None and _finite(v))
    eval_seconds = 0.0
    time_to_target: float | None = None
    steps_to_target: int | None = None
    last_loss: float | None = None
    last_accuracy: float | None = None
    i = done
    while diverged is None:
        if i < steps:
            i += 1
            pending += run(step.data()).detach().float().mean()
            count += 1
            if i % every and i < steps:
                continue
        sync(step.device)
        seconds = time.perf_counter() - started - eval_seconds
        train_loss = (float(pending) + partial) / count if count else None
        t0 = time.perf_counter()
        loss, accuracy = evaluate(step, batches)
        eval_seconds += time.perf_counter() - t0
        curve["steps"].append(i)
        curve["eval_loss"].append(finite(loss))
        curve["train_loss"].append(None if train_loss is None else finite(train_loss))
        curve["seconds"].append(seconds)
        if step.classifies:
            curve["eval_accuracy"].append(accuracy)
        last_loss, last_accuracy = finite(loss), accuracy
        if last_loss is None or (train_loss is not None and not _finite(train_loss)):
            diverged = i
            break
        if target is not None and time_to_target is None and loss <= float(target):
            time_to_target, steps_to_target = seconds, i
        pending.zero_()
        partial, count = 0.0, 0
        if i >= steps:
            break
    return {
        "seed": seed,
        "steps": steps,
        "samples_per_step": step.samples_per_step,
        "curve": curve,
        "final_eval_loss": None if diverged is not None else last_loss,
        "final_eval_accuracy": None if diverged is not None else last_accuracy,
        "diverged_step": diverged,
        "target": None if target is None else float(target),
        "time_to_target": time_to_target,
        "steps_to_target": steps_to_target,
        "train_seconds": time.perf_counter() - started - eval_seconds,
        "eval_seconds": eval_seconds,
    }
