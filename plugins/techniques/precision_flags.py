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

from dataclasses import dataclass, field

from ampsuite import Technique, hookimpl, lazy


@dataclass(frozen=True)
class CudnnBenchmarkOptions:
    limit: int = field(
        default=10,
        metadata={
            "help": "torch.backends.cudnn.benchmark_limit: how many of the algorithms cuDNN's heuristics rank "
            "benchmark mode times per convolution shape (0: every algorithm; 10 is PyTorch's default)",
            "ge": 0,
        },
    )


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="tf32",
            summary="TensorFloat-32 math for float32 matmuls and cuDNN convolutions (Ampere and later)",
            apply=lazy("ampsuite.plugins.techniques._precision_flags:apply_tf32"),
            order=5,
            requires=frozenset({"cuda"}),
        ),
        Technique(
            name="cudnn-benchmark",
            summary="let cuDNN time its algorithms per shape and keep the fastest (first steps pay for it)",
            apply=lazy("ampsuite.plugins.techniques._precision_flags:apply_cudnn_benchmark"),
            options=CudnnBenchmarkOptions,
            order=5,
            requires=frozenset({"cuda"}),
        ),
    ]
