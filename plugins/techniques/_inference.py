"""The torch-dependent part of :mod:`ampsuite.plugins.techniques.inference` (imported on first use)."""

from __future__ import annotations

import torch

from ampsuite import Batch, SkipCell, TrainStep
from ampsuite.plugins.techniques._half_weights import cast_inputs, half_dtype
from ampsuite.plugins.techniques.inference import InferenceOptions


def apply(step: TrainStep, options: InferenceOptions) -> TrainStep:
    if step.model is None:
        raise SkipCell("inference needs a workload with a model")
    if options.loss and step.loss_fn is None:
        raise SkipCell("inference with loss = true needs the workload's loss; set loss = false")
    step.model.eval()
    dtype = half_dtype(step)
    dropped = {"scaler": step.scaler is not None, "optimizer": step.optimizer is not None}
    # Nothing is scaled or stepped: drop the scaler and the optimizer (and with it
    # half-weights' FP32 masters), so memory shows what inference holds.
    step.scaler = None
    step.optimizer = None

    def forward(batch: Batch) -> torch.Tensor:
        assert step.model is not None
        with torch.inference_mode(), step.autocast():
            out = step.model(*cast_inputs(batch, dtype))
            if not options.loss:
                return out
            assert step.loss_fn is not None
            loss: torch.Tensor = step.loss_fn(out.float() if out.is_floating_point() else out, batch.target)
            return loss

    def no_update() -> None:
        return None

    step.forward_backward = forward
    step.update = no_update
    step.model_flops_per_step = None  # a workload's model FLOPs count a training step's backward too
    step.notes["inference"] = {
        "technique": "inference",
        "mode": "torch.inference_mode",
        "returns": "loss" if options.loss else "output",
        "autocast": None if step.autocast_dtype is None else str(step.autocast_dtype).removeprefix("torch."),
        "weights": None if dtype is None else str(dtype).removeprefix("torch."),
        "dropped": [k for k, v in dropped.items() if v],
    }
    return step
