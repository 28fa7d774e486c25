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

import importlib
from types import ModuleType
from typing import Any

from suite import NoOptions, Technique, TrainStep, hookimpl


def _impl() -> ModuleType:
    # The torch-dependent part lives in plugins.techniques._precision_flags: registering this plugin (ampsuite list,
    # --help, suite-file checks) must not import torch.
    return importlib.import_module("plugins.techniques._precision_flags")


def apply_tf32(step: TrainStep, options: NoOptions) -> TrainStep:
    return _impl().apply_tf32(step, options)


def apply_cudnn_benchmark(step: TrainStep, options: NoOptions) -> TrainStep:
    return _impl().apply_cudnn_benchmark(step, options)


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


def __getattr__(name: str) -> Any:
    """Everything else of the plugin (models, datasets) from its implementation module."""
    if name.startswith(("__", "AMPSUITE_", "ampsuite_")):  # the manager's and pluggy's probes stay here
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_impl(), name)
