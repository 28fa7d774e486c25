"""Process-wide backend flags: TF32 math for float32, and cuDNN autotuning.

The worker sets the FP32 baseline (TF32 off for matmul and cuDNN, cuDNN
benchmark off) before the workload is built; these techniques turn the flags
on for their cell. Each cell runs in its own process, so nothing leaks into
the next one.

TF32 uses the legacy ``allow_tf32`` flags, as the worker's baseline does: torch
2.9+ has a newer ``fp32_precision`` API, but once the two are mixed torch
refuses to read the TF32 state (a RuntimeError, which Inductor's convolution
lowering would hit), while the legacy setters keep both APIs readable. What
the backends report afterwards is recorded, read through the new API.
"""

from __future__ import annotations

import contextlib

import torch

from suite import NoOptions, SkipCell, Technique, TrainStep, hookimpl

__all__ = ["apply_cudnn_benchmark", "apply_tf32", "tf32_state"]


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


def apply_cudnn_benchmark(step: TrainStep, options: NoOptions) -> TrainStep:
    if step.device.type != "cuda":
        raise SkipCell(f"cudnn-benchmark needs a CUDA device; this step runs on {step.device.type}")
    torch.backends.cudnn.benchmark = True
    step.notes["cudnn_benchmark"] = {"torch.backends.cudnn.benchmark": torch.backends.cudnn.benchmark}
    return step


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="tf32",
            summary="TensorFloat-32 math for float32 matmuls and cuDNN convolutions (Ampere and later)",
            apply=apply_tf32,
            order=5,
            requires=frozenset({"cuda"}),
        ),
        Technique(
            name="cudnn-benchmark",
            summary="let cuDNN time its algorithms per shape and keep the fastest (first steps pay for it)",
            apply=apply_cudnn_benchmark,
            order=5,
            requires=frozenset({"cuda"}),
        ),
    ]
