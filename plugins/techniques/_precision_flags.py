"""The torch-dependent part of :mod:`ampsuite.plugins.techniques.precision_flags` (imported on first use)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch

from ampsuite import NoOptions, SkipCell, TrainStep

if TYPE_CHECKING:
    from ampsuite.plugins.techniques.precision_flags import CudnnBenchmarkOptions


def tf32_state() -> dict[str, str]:
    """The FP32 precision each backend reports (``tf32`` or ``ieee``/``none``)."""
    state: dict[str, str] = {}
    for key, read in (
        ("matmul", lambda: torch.backends.cuda.matmul.fp32_precision),
        ("cudnn_conv", lambda: torch.backends.cudnn.conv.fp32_precision),  # type: ignore[attr-defined]
        ("cudnn_rnn", lambda: torch.backends.cudnn.rnn.fp32_precision),  # type: ignore[attr-defined]
    ):
        with contextlib.suppress(AttributeError, RuntimeError):  # torch without the new API
            state[key] = str(read())
    return state


def apply_tf32(step: TrainStep, options: NoOptions) -> TrainStep:
    if step.device.type != "cuda":
        raise SkipCell(f"tf32 needs a CUDA device; this step runs on {step.device.type}")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    step.notes["tf32"] = {
        "set": {"torch.backends.cuda.matmul.allow_tf32": True, "torch.backends.cudnn.allow_tf32": True},
        "reported": tf32_state(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    return step


def apply_cudnn_benchmark(step: TrainStep, options: CudnnBenchmarkOptions) -> TrainStep:
    if step.device.type != "cuda":
        raise SkipCell(f"cudnn-benchmark needs a CUDA device; this step runs on {step.device.type}")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.benchmark_limit = options.limit
    step.notes["cudnn_benchmark"] = {
        "torch.backends.cudnn.benchmark": torch.backends.cudnn.benchmark,
        "torch.backends.cudnn.benchmark_limit": torch.backends.cudnn.benchmark_limit,
    }
    return step
