"""How much memory traffic ResNet-50's batch norms need at batch 256 in fp16, against what the kernels probe measured.

    python3 reports/h200/session19/bn_traffic.py [RESULTS.json [CELL_ID]]

Counts each batch norm's tensor from torchvision's ResNet-50 (shapes only, on the meta device) and applies a
pass model of a training step, each pass one read or write of that tensor in fp16:

* batch norm + ReLU (the stem and each block's first two): forward statistics (read x), apply (read x, write y);
  backward reduction (read dy, x; the ReLU mask recomputed from x) and apply (read dy, x, write dx): 8 passes.
* the block's last batch norm + residual add + ReLU: forward statistics (read x), apply (read x and the identity,
  write y); backward reduction (read dy, x, and y for the ReLU mask, which the identity decides too) and apply
  (read dy, x, y, write dx and the identity's gradient): 12 passes.
* the downsampling batch norm (no ReLU; its gradient arrives as the identity's): 8 passes.

At the HBM bandwidth a well-written kernel reaches (90% of the H200's 4.8 TB/s) that is the time fused kernels
would take, to set beside what the compiled step's normalization, reduction and element-wise kernels took. An
estimate of what a fused implementation could reach, not a measurement.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn
from torchvision.models import resnet50

BATCH, BYTES = 256, 2
PEAK, REACHED = 4.8e12, 0.9
PASSES = {"relu": 8, "residual": 12, "downsample": 8}
CLASSES = ("normalization", "reduction", "elementwise")  # the kernels probe's classes batch norm's kernels fall in


def tensors() -> dict[str, int]:
    """Elements per image of the batch norms' tensors, by role."""
    with torch.device("meta"):
        model = resnet50()
    sizes = dict.fromkeys(PASSES, 0)

    def count(role: str) -> object:
        def hook(module: nn.Module, inputs: object, output: torch.Tensor) -> None:
            sizes[role] += output[0].numel()

        return hook

    for name, module in model.named_modules():
        if isinstance(module, nn.BatchNorm2d):
            role = "downsample" if "downsample" in name else "residual" if name.endswith("bn3") else "relu"
            module.register_forward_hook(count(role))  # type: ignore[arg-type]
    model(torch.empty(1, 3, 224, 224, device="meta"))
    return sizes


def main() -> None:
    sizes = tensors()
    per_pass = {k: v * BATCH * BYTES for k, v in sizes.items()}
    total = sum(per_pass[k] * PASSES[k] for k in sizes)
    print(f"elements per image: {sum(sizes.values()):,} ({', '.join(f'{k} {v:,}' for k, v in sizes.items())})")
    print(f"one fp16 pass over all of them at batch {BATCH}: {sum(per_pass.values()) / 1e9:.2f} GB")
    seconds = total / (PEAK * REACHED)
    print(f"the pass model: {total / 1e9:.1f} GB a step, {seconds * 1e3:.2f} ms at {REACHED:.0%} of 4.8 TB/s")
    if len(sys.argv) < 2:
        return
    doc = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    for cell in doc["cells"]:
        kernels = (cell.get("diagnostics") or {}).get("kernels")
        if not kernels or (len(sys.argv) > 2 and cell["id"] != sys.argv[2]) or "/fp32/" in cell["id"]:
            continue
        classes = kernels["classes"]
        ms = {k: classes.get(k, {}).get("seconds_per_step", 0.0) * 1e3 for k in CLASSES}
        print(
            f"{cell['id']}: normalization {ms['normalization']:.2f} + reduction {ms['reduction']:.2f} + element-wise "
            f"{ms['elementwise']:.2f} = {sum(ms.values()):.2f} ms of kernels a step"
        )


if __name__ == "__main__":
    main()
