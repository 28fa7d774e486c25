"""The torch-dependent part of :mod:`ampsuite.plugins.techniques.grad_accumulation` (imported on first use)."""

from __future__ import annotations

import torch

from ampsuite import Batch, SkipCell, TrainStep
from ampsuite.plugins.techniques._loss import MappedLoss
from ampsuite.plugins.techniques.grad_accumulation import AccumulationOptions


def micro_batches(batch: Batch, steps: int) -> list[Batch]:
    """``batch`` split into ``steps`` equal views along the first dimension (inputs and target)."""
    inputs = [t.chunk(steps) for t in batch.inputs]
    targets = batch.target.chunk(steps) if batch.target is not None else [None] * steps
    if any(len(parts) != steps for parts in (*inputs, targets)):
        raise ValueError(f"grad-accumulation: batch does not split into {steps} micro-batches")
    return [Batch(tuple(parts[i] for parts in inputs), targets[i]) for i in range(steps)]


def apply(step: TrainStep, options: AccumulationOptions) -> TrainStep:
    if step.model is None or step.loss_fn is None or step.optimizer is None:
        raise SkipCell("grad-accumulation needs a workload with a model, a loss and an optimizer")
    n = options.steps
    if step.batch_size % n:
        raise SkipCell(f"steps ({n}) must divide the batch size ({step.batch_size})")
    step.loss_fn = MappedLoss(step.loss_fn, lambda loss: loss / n)  # each micro-batch's share of the update
    forward_backward, _ = step.phases()

    def accumulate(batch: Batch) -> torch.Tensor:
        total: torch.Tensor | None = None
        for micro in micro_batches(batch, n):
            loss = forward_backward(micro).float()
            total = loss if total is None else total + loss
        assert total is not None
        return total

    step.forward_backward = accumulate
    step.notes["grad_accumulation"] = {"steps": n, "micro_batch": step.batch_size // n}
    return step
