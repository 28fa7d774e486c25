"""maxpool-offsets' backward as one Triton kernel, a custom operator inductor calls but does not fuse.

Why a kernel of its own: written as tensor ops (``_maxpool_offsets.pool_backward``),
the gather is pointwise, and inductor inlines it into the batch norm backward that
reads the pool's input gradient, once in that backward's reduction and once in its
apply. In ResNet-50's compiled fp16 step on an H200 (torch 2.11.0+cu130,
2026-12-01) that took the pool's backward kernel away (element-wise time -1.23 ms
a step) and added about as much to the batch norm kernels (+1.06 ms). As a
``torch.library.triton_op`` inductor launches the kernel as it is and stores its
output, which the batch norm backward then reads like any other gradient.

Imported only where a cell runs the kernel (CUDA, or the Triton interpreter in the
tests): importing Triton costs a second, and the CPU wheels of torch may lack it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

BLOCK_PIXELS = 32
"""Input pixels a program writes, each for :data:`BLOCK_CHANNELS` channels."""
BLOCK_CHANNELS = 64
"""Channels a program writes per pixel: ResNet's stem has 64, so one program holds a pixel's all."""
NUM_WARPS = 4


# Triton reads a parameter's annotation as its type (tl.constexpr marks compile-time constants), so the
# pointers and sizes stay unannotated
@triton.jit
def _gather_kernel(  # type: ignore[no-untyped-def]
    grad_ptr,
    offset_ptr,
    out_ptr,
    pixels,
    channels,
    height,
    width,
    out_h,
    out_w,
    g_sn,
    g_sc,
    g_sh,
    g_sw,
    o_sn,
    o_sc,
    o_sh,
    o_sw,
    x_sn,
    x_sc,
    x_sh,
    x_sw,
    KH: tl.constexpr,
    KW: tl.constexpr,
    SH: tl.constexpr,
    SW: tl.constexpr,
    PH: tl.constexpr,
    PW: tl.constexpr,
    INDEX64: tl.constexpr,
    EVEN_CHANNELS: tl.constexpr,
    BLOCK_PIXELS: tl.constexpr,
    BLOCK_CHANNELS: tl.constexpr,
):
    # A tile of pixels x channels: the (n, h, w) arithmetic, whose divisions are the costly part, is done
    # once a pixel, and a pixel's channels are contiguous in a channels-last tensor, so its loads vectorize.
    pixel = tl.program_id(0) * BLOCK_PIXELS + tl.arange(0, BLOCK_PIXELS)
    channel = tl.program_id(1) * BLOCK_CHANNELS + tl.arange(0, BLOCK_CHANNELS)
    if INDEX64:  # int32 offsets would wrap past 2**31 elements; int64 division is several times slower
        pixel = pixel.to(tl.int64)
        channel = channel.to(tl.int64)
    pixel_ok = pixel < pixels
    w = pixel % width
    rest = pixel // width
    h = rest % height
    n = rest // height
    # a mask constant along the channels keeps the loads vectorized
    channel_ok = tl.full([BLOCK_CHANNELS], 1, tl.int1) if EVEN_CHANNELS else channel < channels
    acc = tl.zeros([BLOCK_PIXELS, BLOCK_CHANNELS], dtype=tl.float32)
    # the windows that can cover row h start at rows oh*SH - PH for oh <= (h + PH) // SH, at most
    # ceil(KH / SH) of them; likewise for the columns
    for i in tl.static_range((KH + SH - 1) // SH):
        oh = (h + PH) // SH - i
        kh = h + PH - oh * SH
        row_ok = pixel_ok & (oh >= 0) & (oh < out_h) & (kh < KH)
        for j in tl.static_range((KW + SW - 1) // SW):
            ow = (w + PW) // SW - j
            kw = w + PW - ow * SW
            ok = (row_ok & (ow >= 0) & (ow < out_w) & (kw < KW))[:, None] & channel_ok[None, :]
            # the gradient is loaded whether or not the pixel won, so that the load's mask stays a
            # pixel's and vectorizes; the pixels around it read the same window, from L2
            won = tl.load(
                offset_ptr + (n * o_sn + oh * o_sh + ow * o_sw)[:, None] + (channel * o_sc)[None, :], mask=ok, other=-1
            )
            g = tl.load(
                grad_ptr + (n * g_sn + oh * g_sh + ow * g_sw)[:, None] + (channel * g_sc)[None, :], mask=ok, other=0.0
            )
            acc += tl.where(won.to(tl.int32) == (kh * KW + kw)[:, None], g.to(tl.float32), 0.0)
    out = out_ptr + (n * x_sn + h * x_sh + w * x_sw)[:, None] + (channel * x_sc)[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=pixel_ok[:, None] & channel_ok[None, :])


def launch(
    grad: torch.Tensor,
    offset: torch.Tensor,
    out: torch.Tensor,
    kernel: list[int],
    stride: list[int],
    padding: list[int],
    block_pixels: int = BLOCK_PIXELS,
    block_channels: int = BLOCK_CHANNELS,
    num_warps: int = NUM_WARPS,
) -> None:
    """Fill ``out`` (N, C, H, W) with ``grad`` gathered by ``offset``; the tile is a parameter, for benchmarks."""
    batch, channels, height, width = out.shape
    out_h, out_w = grad.shape[-2:]
    pixels = batch * height * width
    largest = max(
        sum((size - 1) * step for size, step in zip(t.shape, t.stride(), strict=True)) for t in (grad, offset, out)
    )
    wrap_triton(_gather_kernel)[(triton.cdiv(pixels, block_pixels), triton.cdiv(channels, block_channels))](
        grad,
        offset,
        out,
        pixels,
        channels,
        height,
        width,
        out_h,
        out_w,
        *grad.stride(),
        *offset.stride(),
        *out.stride(),
        KH=kernel[0],
        KW=kernel[1],
        SH=stride[0],
        SW=stride[1],
        PH=padding[0],
        PW=padding[1],
        INDEX64=largest >= 2**31,
        EVEN_CHANNELS=channels % block_channels == 0,
        BLOCK_PIXELS=block_pixels,
        BLOCK_CHANNELS=block_channels,
        num_warps=num_warps,
    )


@triton_op("ampsuite_resnet_kernels::maxpool_offsets_backward", mutates_args=())
def maxpool_offsets_backward(
    grad: torch.Tensor,
    offset: torch.Tensor,
    height: int,
    width: int,
    kernel: list[int],
    stride: list[int],
    padding: list[int],
    channels_last: bool,
) -> torch.Tensor:
    """The pool input's gradient (N, C, height, width) from the output's gradient and int8 winner offsets."""
    batch, channels = grad.shape[:2]
    layout = torch.channels_last if channels_last else torch.contiguous_format
    out = torch.empty((batch, channels, height, width), dtype=grad.dtype, device=grad.device, memory_format=layout)
    if out.numel():
        launch(grad, offset, out, kernel, stride, padding)
    return out
