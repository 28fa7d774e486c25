"""The memory layout helper that cudnn-batch-norm's operators and maxpool-offsets' backward share."""

from __future__ import annotations

import torch


def kept_layout(x: torch.Tensor) -> torch.memory_format:
    """The layout cuDNN keeps: channels-last when ``x`` is, else contiguous (``suggest_memory_format``)."""
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        return torch.channels_last
    if x.dim() == 5 and x.is_contiguous(memory_format=torch.channels_last_3d) and not x.is_contiguous():
        return torch.channels_last_3d
    return torch.contiguous_format
