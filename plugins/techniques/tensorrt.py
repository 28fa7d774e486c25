"""TensorRT inference through torch-tensorrt, only where a build matching the installed torch is present.

``tensorrt`` compiles the model with ``torch.compile(backend="torch_tensorrt")``
(dynamic shapes off; the engine is built on the first step, which the record
reports as ``first_step_seconds``, never as step time), letting TensorRT use
the kernels of ``precision`` (fp16 by default: TensorRT picks FP16 kernels
where they are faster, FP32 elsewhere). It needs ``inference`` and a CUDA
device.

torch-tensorrt is built against one torch release (torch-tensorrt 2.N goes
with torch 2.N); where it is not installed, or its version does not match the
installed torch's major.minor, the cell is skipped at expansion with that
reason: a mismatched build fails to load or silently falls back.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass, field
from typing import Literal

from ampsuite import CheckContext, Technique, hookimpl, lazy

__all__ = ["TensorRTOptions", "check", "mismatch"]


@dataclass(frozen=True)
class TensorRTOptions:
    precision: Literal["fp32", "fp16", "bf16"] = field(
        default="fp16", metadata={"help": "kernels TensorRT may use beside FP32: fp32, fp16 or bf16"}
    )


def _major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def mismatch(trt_version: str | None, torch_version: str) -> str | None:
    """Why torch-tensorrt ``trt_version`` cannot serve torch ``torch_version`` (None: it can)."""
    if trt_version is None:
        return (
            f"torch-tensorrt is not installed (pip install torch-tensorrt=={_major_minor(torch_version)}.*, "
            f"the build for torch {torch_version})"
        )
    if _major_minor(trt_version) != _major_minor(torch_version):
        return f"torch-tensorrt {trt_version} is built for torch {_major_minor(trt_version)}, not torch {torch_version}"
    return None


def _installed(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def check(ctx: CheckContext) -> str | None:
    if "torch-compile" in ctx.techniques:
        return "tensorrt compiles the model itself (torch.compile backend torch_tensorrt); drop torch-compile"
    if "cuda-graphs" in ctx.techniques:
        return "tensorrt runs its own engine; cuda-graphs around it is not supported here"
    trt = _installed("torch-tensorrt") or _installed("torch_tensorrt")
    if trt is None and importlib.util.find_spec("torch_tensorrt") is not None:
        trt = "unknown"
    return mismatch(trt, _installed("torch") or "unknown")


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="tensorrt",
            summary="TensorRT inference, torch.compile(backend='torch_tensorrt'); only with a matching torch-tensorrt",
            apply=lazy("ampsuite.plugins.techniques._tensorrt:apply"),
            options=TensorRTOptions,
            order=70,
            requires=frozenset({"cuda", "inference"}),
            check=check,
            requires_traits=frozenset({"model"}),
        )
    ]
