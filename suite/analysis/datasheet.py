"""Published dense bf16 Tensor Core peaks per GPU kind: the denominator of MFU as LLM training reports it.

ampsuite's own MFU (``Derived.mfu``) divides the FLOPs torch counted by the
matmul peak ampsuite *measured* on the device. LLM training reports (torchtitan's
among them) divide a workload's *model* FLOPs (an LLM's ``6 N + 12 L H Q T``
per token, ``metrics.model_flops_per_step``) by the GPU's *published* dense
bf16 peak instead, whatever precision the step ran in. Both are shown for a
cell that declares model FLOPs: against this table (``mfu_datasheet``) and
against the bf16 peak measured on the machine (``mfu_measured``); for a
cell whose products did not run in 16 bits (FP8, TF32) the figure is
"bf16-equivalent": the same FLOPs against the same bf16 peak.

The table is keyed by the GPU name the environment records
(``environment.gpu.name``, torch's ``get_device_name``), matched without
regard to case, the first entry whose every word is in the name winning:
more specific names come first (``H100 PCIe`` before ``H100``). A GPU not in
the table gets no datasheet MFU, never a guess. Figures are dense (no 2:4
sparsity), in TFLOP/s, for the SXM boards unless the name says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["BF16_DENSE_TFLOPS", "datasheet_bf16_tflops"]

BF16_DENSE_TFLOPS: tuple[tuple[str, float], ...] = (
    ("GB200", 2500.0),
    ("B200", 2250.0),
    ("H200 NVL", 835.5),
    ("H200", 989.4),
    ("H100 PCIe", 756.5),
    ("H100 NVL", 835.5),
    ("H100", 989.4),
    ("H800", 989.4),
    ("GH200", 989.4),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.05),
    ("L4", 121.0),
    ("A10", 125.0),
)
"""(words the GPU name holds, dense bf16 TFLOP/s), most specific first."""


def datasheet_bf16_tflops(gpu_name: str | None) -> float | None:
    """The published dense bf16 peak of the GPU named ``gpu_name``, or None when it is not in the table."""
    if not gpu_name:
        return None
    words = set(gpu_name.upper().replace("-", " ").split())
    for key, tflops in BF16_DENSE_TFLOPS:
        if set(key.upper().split()) <= words:
            return tflops
    return None


def environment_gpu_name(doc: Mapping[str, Any]) -> str | None:
    """``environment.gpu.name`` of a results document, or None (a CPU run)."""
    environment = doc.get("environment")
    gpu = environment.get("gpu") if isinstance(environment, Mapping) else None
    name = gpu.get("name") if isinstance(gpu, Mapping) else None
    return str(name) if name else None
