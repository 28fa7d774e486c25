"""The torch-dependent part of :mod:`ampsuite_resnet_kernels.maxpool_offsets` (imported when a cell applies it)."""

from __future__ import annotations

import importlib.util
from typing import Any, get_args

import torch
import torch.nn.functional as F
from ampsuite import SkipCell, TrainStep
from torch import nn

from ampsuite_resnet_kernels._layout import kept_layout
from ampsuite_resnet_kernels.maxpool_offsets import Backward, MaxPoolOffsetsOptions

MAX_WINDOW = 127
"""The most pixels a window may hold: its winner's offset is stored as int8."""

BACKWARDS: tuple[str, ...] = get_args(Backward)
"""How the backward gathers: one Triton kernel (:func:`kernel_backward`) or tensor ops (:func:`pool_backward`)."""


def _pair(value: int | tuple[int, ...]) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    return int(value[0]), int(value[-1])


def pool_forward(
    x: torch.Tensor, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The max pool of ``x`` and, per output, its winner's offset ``kh * kw_size + kw`` in the window (int8)."""
    (kh_size, kw_size), (sh, sw), (ph, pw) = kernel, stride, padding
    height, width = x.shape[-2:]
    out_h = (height + 2 * ph - kh_size) // sh + 1
    out_w = (width + 2 * pw - kw_size) // sw + 1
    padded = F.pad(x, (pw, pw, ph, ph), value=float("-inf"))

    def window(kh: int, kw: int) -> torch.Tensor:
        """Every window's pixel at (kh, kw): a strided view of the padded input."""
        return padded[..., kh : kh + sh * (out_h - 1) + 1 : sh, kw : kw + sw * (out_w - 1) + 1 : sw]

    best = window(0, 0)
    offset = torch.zeros_like(best, dtype=torch.int8)
    for position in range(1, kh_size * kw_size):
        view = window(*divmod(position, kw_size))
        # ATen's rule: a strictly larger value or a NaN takes the window, so ties keep the first.
        take = (view > best) | torch.isnan(view)
        offset = torch.where(take, position, offset)  # a Python int keeps int8
        best = torch.where(take, view, best)
    return best, offset


def pool_backward(
    grad: torch.Tensor,
    offset: torch.Tensor,
    size: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
) -> torch.Tensor:
    """The input's gradient: each pixel sums the gradients of the windows whose winner it is.

    A gather, written per stride phase: the pixels at ``(s*m + r)`` of one phase ``r`` are covered by
    the same window rows ``kh`` (those with ``kh = r + p (mod s)``), each at a fixed shift of ``m``,
    so every phase is a sum of shifted, masked views, and the phases interleave by a stack and a
    reshape that inductor turns into index arithmetic.
    """
    (kh_size, kw_size), (sh, sw), (ph, pw) = kernel, stride, padding
    height, width = size
    rows, cols = -(-height // sh), -(-width // sw)
    # Enough zero (and offset -1, which matches no window) border that every shifted view stays in range.
    border = max(kh_size, kw_size) // min(sh, sw) + 1
    pad = (border, border + cols, border, border + rows)
    grad_p = F.pad(grad, pad)
    offset_p = F.pad(offset, pad, value=-1)
    phase_rows = []
    for rh in range(sh):
        phase_cols = []
        for rw in range(sw):
            acc: torch.Tensor | None = None
            for kh in range(kh_size):
                if (rh + ph - kh) % sh:
                    continue
                dh = border + (rh + ph - kh) // sh
                for kw in range(kw_size):
                    if (rw + pw - kw) % sw:
                        continue
                    dw = border + (rw + pw - kw) // sw
                    won = offset_p[..., dh : dh + rows, dw : dw + cols] == kh * kw_size + kw
                    term = torch.where(won, grad_p[..., dh : dh + rows, dw : dw + cols], 0)
                    acc = term if acc is None else acc + term
            if acc is None:  # a stride larger than the kernel: no window covers this phase
                acc = grad.new_zeros((*grad.shape[:-2], rows, cols))
            phase_cols.append(acc)
        phase_rows.append(torch.stack(phase_cols, dim=-1))
    interleaved = torch.stack(phase_rows, dim=-3)  # (..., rows, sh, cols, sw)
    return interleaved.reshape(*grad.shape[:-2], rows * sh, cols * sw)[..., :height, :width]


def kernel_backward(
    grad: torch.Tensor,
    offset: torch.Tensor,
    size: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    channels_last: bool,
) -> torch.Tensor:
    """:func:`pool_backward` as one Triton kernel (``ampsuite_resnet_kernels::maxpool_offsets_backward``), opaque to
    inductor."""
    from ampsuite_resnet_kernels import _maxpool_triton  # noqa: F401  (registers the operator)

    op = torch.ops.ampsuite_resnet_kernels.maxpool_offsets_backward
    if grad.dim() == 3:  # an unbatched pool
        return op(grad[None], offset[None], *size, [*kernel], [*stride], [*padding], channels_last)[0]
    result: torch.Tensor = op(grad, offset, *size, [*kernel], [*stride], [*padding], channels_last)
    return result


class _OffsetMaxPool(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        padding: tuple[int, int],
        backward: str,
    ) -> torch.Tensor:
        out, offset = pool_forward(x, kernel, stride, padding)
        ctx.save_for_backward(offset)
        ctx.geometry = (tuple(x.shape[-2:]), kernel, stride, padding)
        ctx.backward_kind = backward
        # the input's gradient in the input's layout: the batch norm backward that reads it expects that
        ctx.channels_last = kept_layout(x) is torch.channels_last
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (offset,) = ctx.saved_tensors
        size, kernel, stride, padding = ctx.geometry
        if ctx.backward_kind == "kernel":
            dx = kernel_backward(grad, offset, size, kernel, stride, padding, ctx.channels_last)
        else:
            dx = pool_backward(grad, offset, size, kernel, stride, padding)
        return dx, None, None, None, None


class OffsetMaxPool2d(nn.Module):
    """An ``nn.MaxPool2d`` (no dilation, floor mode) whose backward reads saved int8 window offsets."""

    def __init__(self, pool: nn.MaxPool2d, backward: str = "inline") -> None:
        super().__init__()
        if backward not in BACKWARDS:
            raise ValueError(f"backward must be one of {', '.join(map(repr, BACKWARDS))}, got {backward!r}")
        self.kernel_size = _pair(pool.kernel_size)
        self.stride = _pair(pool.stride if pool.stride is not None else pool.kernel_size)
        self.padding = _pair(pool.padding)
        self.backward = backward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = _OffsetMaxPool.apply(x, self.kernel_size, self.stride, self.padding, self.backward)
        return out

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, backward={self.backward}"


def why_not(pool: nn.MaxPool2d) -> str | None:
    """Why ``pool`` cannot be replaced (None when it can)."""
    if _pair(pool.dilation) != (1, 1):
        return f"dilation {pool.dilation}"
    if pool.ceil_mode:
        return "ceil_mode"
    if pool.return_indices:
        return "return_indices (its caller reads ATen's int64 indices)"
    kh, kw = _pair(pool.kernel_size)
    if kh * kw > MAX_WINDOW:
        return f"a {kh}x{kw} window: more than {MAX_WINDOW} offsets for int8"
    return None


def replace(model: nn.Module, backward: str = "inline") -> tuple[list[str], dict[str, str]]:
    """Replace every plain ``nn.MaxPool2d`` of ``model`` that qualifies; the names replaced, and why not the rest."""
    replaced: list[str] = []
    left: dict[str, str] = {}
    for name, pool in [(n, m) for n, m in model.named_modules() if type(m) is nn.MaxPool2d]:
        reason = why_not(pool) if name else "the model itself"
        if reason is None:
            model.set_submodule(name, OffsetMaxPool2d(pool, backward))
            replaced.append(name)
        else:
            left[name] = reason
    return replaced, left


def apply(step: TrainStep, options: MaxPoolOffsetsOptions) -> TrainStep:
    if step.model is None:
        raise SkipCell("maxpool-offsets needs a workload with a model (this step has its own phases)")
    backward = options.backward
    notes: dict[str, Any] = {}
    if backward == "kernel" and step.device.type != "cuda":
        # Triton runs on GPUs; the CPU cell keeps the technique's forward and says what its backward was
        backward = "inline"
        notes["backward_note"] = f"backward='kernel' runs on CUDA only; this {step.device.type} cell gathered inline"
    elif backward == "kernel" and importlib.util.find_spec("triton") is None:
        raise SkipCell("maxpool-offsets backward='kernel' needs Triton, which this torch installation lacks")
    replaced, left = replace(step.model, backward)
    if not replaced:
        why = "; ".join(f"{name}: {reason}" for name, reason in left.items())
        raise SkipCell(f"maxpool-offsets: the model has no max pool it can replace{f' ({why})' if why else ''}")
    step.notes["maxpool_offsets"] = {
        "replaced": replaced,
        "backward": backward,
        **notes,
        **({"left": left} if left else {}),
    }
    return step
