"""The torch-dependent part of :mod:`ampsuite.plugins.techniques.tensorrt` (imported on first use)."""

from __future__ import annotations

from typing import Any

import torch

from ampsuite import SkipCell, TrainStep
from ampsuite.plugins.techniques.tensorrt import TensorRTOptions


def apply(step: TrainStep, options: TensorRTOptions) -> TrainStep:
    if step.model is None:
        raise SkipCell("tensorrt needs a workload with a model")
    if step.device.type != "cuda":
        raise SkipCell(f"tensorrt needs a CUDA device; this step runs on {step.device.type}")
    try:
        import torch_tensorrt  # noqa: F401  (registers the torch.compile backend)
    except Exception as exc:
        raise SkipCell(f"torch-tensorrt does not load with this torch: {type(exc).__name__}: {exc}") from exc
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[options.precision]
    trt_options: dict[str, Any] = {"enabled_precisions": {torch.float32, dtype}, "min_block_size": 1}
    step.model = torch.compile(  # type: ignore[assignment]
        step.model, backend="torch_tensorrt", dynamic=False, options=trt_options
    )
    step.notes["tensorrt"] = {"precision": options.precision, "backend": "torch_tensorrt"}
    return step
