"""The torch-dependent part of :mod:`ampsuite.plugins.techniques.amp` (imported on first use)."""

from __future__ import annotations

import torch

from ampsuite import NoOptions, TrainStep
from ampsuite.plugins.techniques.amp import Fp16Options


def apply_fp16(step: TrainStep, options: Fp16Options) -> TrainStep:
    step.autocast_dtype = torch.float16
    notes: dict[str, object] = {"dtype": "float16", "scaler": options.scaler}
    if options.scaler:
        step.scaler = torch.amp.GradScaler(
            step.device.type,
            init_scale=options.init_scale,
            growth_factor=options.growth_factor,
            backoff_factor=options.backoff_factor,
            growth_interval=options.growth_interval,
        )
        notes.update(init_scale=options.init_scale, growth_interval=options.growth_interval)
    step.notes["amp"] = notes
    return step


def apply_bf16(step: TrainStep, options: NoOptions) -> TrainStep:
    step.autocast_dtype = torch.bfloat16
    step.scaler = None
    step.notes["amp"] = {"dtype": "bfloat16", "scaler": False}
    return step
