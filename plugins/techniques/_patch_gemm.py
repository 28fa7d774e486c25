"""The torch-dependent part of :mod:`ampsuite.plugins.techniques.patch_gemm` (imported on first use)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ampsuite import NoOptions, SkipCell, TrainStep


class PatchGemm(nn.Module):
    """A non-overlapping ``nn.Conv2d`` (kernel == stride) as a GEMM: same parameters, same result."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        self.kernel_size = (int(conv.kernel_size[0]), int(conv.kernel_size[1]))
        self.out_channels = conv.out_channels
        self.weight = conv.weight
        self.bias = conv.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        kh, kw = self.kernel_size
        rows, cols = h // kh, w // kw
        # The convolution's output size floors: pixels past the last whole patch are never read.
        x = x[:, :, : rows * kh, : cols * kw]
        patches = x.reshape(n, c, rows, kh, cols, kw).permute(0, 2, 4, 1, 3, 5).reshape(n, rows, cols, c * kh * kw)
        out = F.linear(patches, self.weight.reshape(self.out_channels, -1), self.bias)
        # (n, rows, cols, out) seen as (n, out, rows, cols): the convolution's shape, in channels-last strides.
        return out.permute(0, 3, 1, 2)

    def extra_repr(self) -> str:
        return f"out_channels={self.out_channels}, kernel_size={self.kernel_size}"


def why_not(conv: nn.Conv2d) -> str | None:
    """Why ``conv`` is not a non-overlapping patch convolution (None when it is)."""
    if tuple(conv.kernel_size) != tuple(conv.stride):
        return f"kernel {tuple(conv.kernel_size)} differs from stride {tuple(conv.stride)}"
    if isinstance(conv.padding, str) or any(conv.padding):
        return f"padding {conv.padding}"
    if any(d != 1 for d in conv.dilation) or conv.groups != 1:
        return "dilated or grouped"
    return None


def replace(model: nn.Module) -> list[str]:
    """Replace every patch convolution of ``model`` by :class:`PatchGemm`; the names replaced."""
    replaced = []
    for name, conv in [(n, m) for n, m in model.named_modules() if type(m) is nn.Conv2d]:
        if name and why_not(conv) is None:
            model.set_submodule(name, PatchGemm(conv))
            replaced.append(name)
    return replaced


def apply(step: TrainStep, options: NoOptions) -> TrainStep:
    if step.model is None:
        raise SkipCell("patch-gemm needs a workload with a model (this step has its own phases)")
    replaced = replace(step.model)
    if not replaced:
        raise SkipCell("patch-gemm: the model has no convolution whose kernel equals its stride (no patch embedding)")
    step.notes["patch_gemm"] = {"replaced": replaced}
    return step
