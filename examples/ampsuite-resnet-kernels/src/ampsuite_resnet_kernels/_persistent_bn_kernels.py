"""Training batch norm + ReLU as one persistent Triton kernel a pass, with a grid barrier between statistics and apply.

Why: in ResNet-50's compiled fp16 step on an H200 (torch 2.11.0+cu130, 2026-12-02), inductor runs each batch
norm that no residual add follows in five kernels, and the 30 small ones (64 x 56x56 down to 2048 x 7x7 at batch
256, 3-100 MB each) take 4.47 ms a step against a traffic bound of 2.71: every kernel ramps up and drains on a few
MB, and the apply reads from DRAM what the statistics read a moment before. Here each pass is one launch of a grid small
enough to be resident at once (a few programs an SM). A program takes the statistics of its rows, the programs of
a channel block wait for each other at a barrier in global memory, and each then applies to its own rows, read
back in the reverse order so that the rows it read last, the likeliest still in L2, come first. The backward does
the same with the sums of the masked gradient and of it times x-hat.

The tensor is seen as its (rows = N*H*W, C) row-major matrix, which a channels-last activation is without a copy.
A program's sums (of x - K and its square, K each channel's first value, so that a mean far from zero against the
spread cancels nothing; in the backward, of the masked gradient and of it times x-hat) go into the channel's totals
by atomic adds before the barrier, and after it every program reads two numbers a channel. Merging every program's
partials in every program instead (an earlier version of these kernels) has each of some 500 programs of a 64-channel
layer read some 500 partials, by the count more traffic than the activation itself, and a chain of dependent L2
reads. Atomic float adds land in no fixed order, so the statistics may differ from run to run in the last bits, as
with any split reduction by atomics.

The barrier needs every program of the grid resident at once; :func:`resident` sizes the grid from the compiled
kernel's registers and shared memory. Triton's interpreter runs programs one after another, so a barrier there
would wait forever: there (what the CPU tests run) each pass is two launches of the same kernel, statistics then
apply, and only the barrier itself goes untested off a GPU.

Imported only where a cell runs the kernels: importing Triton costs a second, and the CPU wheels of torch may lack it.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

FORWARD_OP = "ampsuite_resnet_kernels::persistent_bn_relu"
BACKWARD_OP = "ampsuite_resnet_kernels::persistent_bn_relu_backward"

TILE_ROWS = 128
TILE_CHANNELS = 64
NUM_WARPS = 4
"""Warps a program, by default: the technique's ``num_warps`` option. Compiled for sm_90 (Triton 3.8), the
128 x 64 tile takes 255 registers a thread with 4 warps and spills (88 bytes of stack forward, 424 backward);
with 8 warps 203 and 254, no spill, 16 warps an SM instead of 8. Yet 8 warps ran 9-25% slower on every ResNet-50
shape on an H200 (torch 2.11.0+cu130, 2026-12-02, ``python3 reports/h200/bn_persistent.py`` at ampsuite commit
0bbfc1d): the spill is not what holds the kernels back."""
PER_SM = 4
"""Programs an SM runs, at most: more hide more memory latency, and all of them must fit at once."""

_TOP_BIT = tl.constexpr(0x80000000)


@triton.jit
def _barrier(sem_ptr, programs):  # type: ignore[no-untyped-def]
    """Wait until ``programs`` programs (the grid's first axis) have arrived at ``sem_ptr``.

    The counter's top bit flips once a barrier: program 0 adds 2**31 - (programs - 1) and every other program 1,
    2**31 in all, so the bit flips at the last arrival and the low bits come back to where they were. A semaphore
    is thus ready for its next use without a reset, whichever value of the two it holds.
    """
    tl.debug_barrier()  # every warp's stores of this program are issued before the program arrives
    # the tail of a float32 work buffer to PyTorch (one zero-fill for sums and semaphores), a uint32 counter here
    sem_ptr = sem_ptr.to(tl.pointer_type(tl.uint32), bitcast=True)
    top = tl.full([], _TOP_BIT, tl.uint32)
    one = tl.full([], 1, tl.uint32)
    add = tl.where(tl.program_id(0) == 0, top - (programs.to(tl.uint32) - one), one)
    before = tl.atomic_add(sem_ptr, add, sem="release", scope="gpu")
    flipped = False
    while not flipped:
        now = tl.atomic_add(sem_ptr, 0 * one, sem="acquire", scope="gpu")
        flipped = ((before ^ now) & top) != 0
    tl.debug_barrier()


@triton.jit
def _tile(start, end, t, cols, col_ok, channels, TILE_ROWS: tl.constexpr):  # type: ignore[no-untyped-def]
    """Offsets and mask of a split's tile ``t`` (rows start + t*TILE_ROWS...): none past either end of the split."""
    r = start + t * TILE_ROWS + tl.arange(0, TILE_ROWS)
    ok = ((r >= start) & (r < end))[:, None] & col_ok[None, :]
    return r[:, None] * channels + cols[None, :], ok


@triton.jit
def _forward_kernel(  # type: ignore[no-untyped-def]
    x_ptr,
    y_ptr,
    weight_ptr,
    bias_ptr,
    mean_ptr,
    rstd_ptr,
    var_ptr,
    work_ptr,
    rows,
    channels,
    rows_per,
    eps,
    PHASE: tl.constexpr,
    TILE_ROWS: tl.constexpr,
    TILE_CHANNELS: tl.constexpr,
):
    # PHASE 0: statistics, barrier, apply, in one launch; 1: statistics only; 2: apply only (after a launch of 1).
    # work: zeros, [sum of x - K | sum of (x - K)^2 | a semaphore per channel block], K each channel's first value
    split = tl.program_id(0)
    splits = tl.num_programs(0)
    block = tl.program_id(1)
    cols = block * TILE_CHANNELS + tl.arange(0, TILE_CHANNELS)
    col_ok = cols < channels
    start = split * rows_per
    end = tl.minimum(start + rows_per, rows)
    tiles = tl.cdiv(end - start, TILE_ROWS)
    # the shift: sums of x - K lose nothing to cancellation when the mean is far from 0 against the spread
    shift = tl.load(x_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    if PHASE != 2:
        s1 = tl.zeros([TILE_CHANNELS], dtype=tl.float32)
        s2 = tl.zeros([TILE_CHANNELS], dtype=tl.float32)
        # each tile's load is issued before the previous tile is reduced: two tiles in flight a program
        offs, ok = _tile(start, end, 0, cols, col_ok, channels, TILE_ROWS)
        ahead = tl.load(x_ptr + offs, mask=ok, other=0.0)
        for t in range(0, tiles):
            d = tl.where(ok, ahead.to(tl.float32) - shift[None, :], 0.0)
            offs, ok = _tile(start, end, t + 1, cols, col_ok, channels, TILE_ROWS)
            ahead = tl.load(x_ptr + offs, mask=ok, other=0.0)
            s1 += tl.sum(d, axis=0)
            s2 += tl.sum(d * d, axis=0)
        # into the channel's totals at once: every program then reads two numbers a channel, not every partial
        tl.atomic_add(work_ptr + cols, s1, mask=col_ok, sem="relaxed", scope="gpu")
        tl.atomic_add(work_ptr + channels + cols, s2, mask=col_ok, sem="relaxed", scope="gpu")
    if PHASE == 0:
        _barrier(work_ptr + 2 * channels + block, splits)
    if PHASE != 1:
        # .cg: from L2, where the other programs' atomics are, never an L1 line
        s1 = tl.load(work_ptr + cols, mask=col_ok, other=0.0, cache_modifier=".cg")
        s2 = tl.load(work_ptr + channels + cols, mask=col_ok, other=0.0, cache_modifier=".cg")
        centred = s1 / rows
        var = tl.maximum(s2 / rows - centred * centred, 0.0)
        mean = shift + centred
        rstd = 1.0 / tl.sqrt(var + eps)
        if split == 0:
            tl.store(mean_ptr + cols, mean, mask=col_ok)
            tl.store(rstd_ptr + cols, rstd, mask=col_ok)
            tl.store(var_ptr + cols, var, mask=col_ok)
        scale = rstd * tl.load(weight_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        bias = tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        offs, ok = _tile(start, end, tiles - 1, cols, col_ok, channels, TILE_ROWS)
        ahead = tl.load(x_ptr + offs, mask=ok, other=0.0)
        for t in range(0, tiles):
            x = ahead.to(tl.float32)
            here, here_ok = offs, ok
            offs, ok = _tile(start, end, tiles - 2 - t, cols, col_ok, channels, TILE_ROWS)
            ahead = tl.load(x_ptr + offs, mask=ok, other=0.0)
            # (x - mean) first: x * scale + (bias - mean * scale) cancels where the mean is large against the spread
            z = (x - mean[None, :]) * scale[None, :] + bias[None, :]
            tl.store(y_ptr + here, tl.maximum(z, 0.0).to(y_ptr.dtype.element_ty), mask=here_ok)


@triton.jit
def _backward_kernel(  # type: ignore[no-untyped-def]
    dy_ptr,
    x_ptr,
    dx_ptr,
    weight_ptr,
    bias_ptr,
    mean_ptr,
    rstd_ptr,
    dweight_ptr,
    dbias_ptr,
    work_ptr,
    rows,
    channels,
    rows_per,
    PHASE: tl.constexpr,
    TILE_ROWS: tl.constexpr,
    TILE_CHANNELS: tl.constexpr,
):
    # work: zeros, [sum of the masked gradient g | sum of g * x-hat | a semaphore per channel block]
    split = tl.program_id(0)
    splits = tl.num_programs(0)
    block = tl.program_id(1)
    cols = block * TILE_CHANNELS + tl.arange(0, TILE_CHANNELS)
    col_ok = cols < channels
    start = split * rows_per
    end = tl.minimum(start + rows_per, rows)
    tiles = tl.cdiv(end - start, TILE_ROWS)
    mean = tl.load(mean_ptr + cols, mask=col_ok, other=0.0)
    rstd = tl.load(rstd_ptr + cols, mask=col_ok, other=0.0)
    w = tl.load(weight_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    b = tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    # the forward's z = (x - mean) * scale + bias, in the same order, so that the ReLU mask is the forward's to the bit
    scale = rstd * w
    if PHASE != 2:
        g_sum = tl.zeros([TILE_CHANNELS], dtype=tl.float32)
        gx_sum = tl.zeros([TILE_CHANNELS], dtype=tl.float32)
        offs, ok = _tile(start, end, 0, cols, col_ok, channels, TILE_ROWS)
        x_ahead = tl.load(x_ptr + offs, mask=ok, other=0.0)
        dy_ahead = tl.load(dy_ptr + offs, mask=ok, other=0.0)
        for t in range(0, tiles):
            x = x_ahead.to(tl.float32)
            dy = dy_ahead.to(tl.float32)
            here_ok = ok
            offs, ok = _tile(start, end, t + 1, cols, col_ok, channels, TILE_ROWS)
            x_ahead = tl.load(x_ptr + offs, mask=ok, other=0.0)
            dy_ahead = tl.load(dy_ptr + offs, mask=ok, other=0.0)
            live = ((x - mean[None, :]) * scale[None, :] + b[None, :] > 0) & here_ok
            g = tl.where(live, dy, 0.0)
            g_sum += tl.sum(g, axis=0)
            gx_sum += tl.sum(g * ((x - mean[None, :]) * rstd[None, :]), axis=0)
        tl.atomic_add(work_ptr + cols, g_sum, mask=col_ok, sem="relaxed", scope="gpu")
        tl.atomic_add(work_ptr + channels + cols, gx_sum, mask=col_ok, sem="relaxed", scope="gpu")
    if PHASE == 0:
        _barrier(work_ptr + 2 * channels + block, splits)
    if PHASE != 1:
        db = tl.load(work_ptr + cols, mask=col_ok, other=0.0, cache_modifier=".cg")
        dw = tl.load(work_ptr + channels + cols, mask=col_ok, other=0.0, cache_modifier=".cg")
        if split == 0:
            tl.store(dbias_ptr + cols, db, mask=col_ok)
            tl.store(dweight_ptr + cols, dw, mask=col_ok)
        mean_db = db / rows
        mean_dw = dw / rows
        offs, ok = _tile(start, end, tiles - 1, cols, col_ok, channels, TILE_ROWS)
        x_ahead = tl.load(x_ptr + offs, mask=ok, other=0.0)
        dy_ahead = tl.load(dy_ptr + offs, mask=ok, other=0.0)
        for t in range(0, tiles):
            x = x_ahead.to(tl.float32)
            dy = dy_ahead.to(tl.float32)
            here, here_ok = offs, ok
            offs, ok = _tile(start, end, tiles - 2 - t, cols, col_ok, channels, TILE_ROWS)
            x_ahead = tl.load(x_ptr + offs, mask=ok, other=0.0)
            dy_ahead = tl.load(dy_ptr + offs, mask=ok, other=0.0)
            live = ((x - mean[None, :]) * scale[None, :] + b[None, :] > 0) & here_ok
            g = tl.where(live, dy, 0.0)
            xhat = (x - mean[None, :]) * rstd[None, :]
            dx = scale[None, :] * (g - mean_db[None, :] - xhat * mean_dw[None, :])
            tl.store(dx_ptr + here, dx.to(dx_ptr.dtype.element_ty), mask=here_ok)


def interpreted() -> bool:
    """Whether Triton runs kernels in its CPU interpreter, where programs run one after another."""
    return os.environ.get("TRITON_INTERPRET") == "1"


# How CUDA hands an SM's resources to blocks (the occupancy calculator's rules, compute capability 8.0 to 9.0):
# registers go to a warp 256 at a time, shared memory to a block 128 bytes at a time plus 1 KB the driver keeps for
# the block, and an SM takes 32 blocks at most. A count from the raw figures can be one block too many (170 registers
# a thread, 4 warps: 3 blocks by the raw product, 2 as allocated), and one block too many is a grid the barrier waits
# on forever.
REGISTER_UNIT = 256
SHARED_UNIT = 128
SHARED_RESERVED = 1024
MAX_BLOCKS_PER_SM = 32


def blocks_per_sm(
    n_regs: int, shared: int, num_warps: int, regs_per_sm: int, shared_per_sm: int, threads_per_sm: int
) -> int:
    """How many blocks of a kernel one SM holds at once, as CUDA allocates registers and shared memory."""
    regs_per_warp = -(-n_regs * 32 // REGISTER_UNIT) * REGISTER_UNIT
    by_regs = (regs_per_sm // regs_per_warp) // num_warps if regs_per_warp else MAX_BLOCKS_PER_SM
    shared_per_block = -(-(shared + SHARED_RESERVED) // SHARED_UNIT) * SHARED_UNIT
    by_shared = shared_per_sm // shared_per_block
    by_threads = threads_per_sm // (32 * num_warps)
    return min(by_regs, by_shared, by_threads, MAX_BLOCKS_PER_SM)


@functools.cache
def resident(kernel_name: str, index: int, tile_rows: int, tile_channels: int, num_warps: int, per_sm: int) -> int:
    """How many programs of a kernel the GPU holds at once, from the compiled kernel's registers and shared memory."""
    props = torch.cuda.get_device_properties(index)
    kernel = {"forward": _forward_kernel, "backward": _backward_kernel}[kernel_name]
    compiled = _compiled(kernel, tile_rows, tile_channels, num_warps)
    if hasattr(compiled, "_init_handles"):
        compiled._init_handles()  # Triton reads the kernel's resources when it first loads it
    fits = blocks_per_sm(
        compiled.n_regs,
        compiled.metadata.shared,
        num_warps,
        getattr(props, "regs_per_multiprocessor", 65536),
        getattr(props, "shared_memory_per_multiprocessor", 228 * 1024),
        getattr(props, "max_threads_per_multi_processor", 2048),
    )
    if fits < 1:
        raise RuntimeError(f"persistent batch norm: the {kernel_name} kernel does not fit on an SM")
    return min(fits, per_sm) * props.multi_processor_count


def _compiled(kernel: Any, tile_rows: int, tile_channels: int, num_warps: int) -> Any:
    """The kernel compiled for a float16 problem without launching it, so that its resources can be read.

    Pointers are given as dtypes, which Triton's warmup takes in place of tensors: this runs while torch.compile
    traces the model with fake tensors, where a tensor made here would be fake too.
    """
    h, f = torch.float16, torch.float32
    meta = {"PHASE": 0, "TILE_ROWS": tile_rows, "TILE_CHANNELS": tile_channels}
    if kernel is _forward_kernel:
        args: list[Any] = [h, h, f, f, f, f, f, f, 1 << 20, 64, 4096, 1e-5]
    else:
        args = [h, h, h, f, f, f, f, f, f, f, 1 << 20, 64, 4096]
    return kernel.warmup(*args, grid=(1,), num_warps=num_warps, **meta)


def _grid(kernel_name: str, x: torch.Tensor, rows: int, channels: int, num_warps: int) -> tuple[int, int, int]:
    """(row splits, channel blocks, rows a split): as many programs as the GPU holds at once, rows split evenly."""
    blocks = triton.cdiv(channels, TILE_CHANNELS)
    if x.device.type == "cuda" and not interpreted():
        programs = resident(kernel_name, x.device.index or 0, TILE_ROWS, TILE_CHANNELS, num_warps, PER_SM)
    else:
        programs = 4 * blocks
    splits = max(1, min(triton.cdiv(rows, TILE_ROWS), programs // blocks))
    per = triton.cdiv(triton.cdiv(rows, splits), TILE_ROWS) * TILE_ROWS
    return triton.cdiv(rows, per), blocks, per


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """A channels-last (N, C, H, W) tensor as its (N*H*W, C) row-major matrix, without a copy."""
    n, c, h, w = t.shape
    return t.permute(0, 2, 3, 1).reshape(n * h * w, c)


def _phases() -> tuple[int, ...]:
    return (1, 2) if interpreted() else (0,)


@triton_op(FORWARD_OP, mutates_args=())
def persistent_bn_relu(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, num_warps: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Training ``relu(batch_norm(x))`` of a channels-last (N, C, H, W) ``x``: (y, mean, 1/std, biased variance)."""
    x2 = as_rows(x)
    rows, channels = x2.shape
    y = torch.empty_like(x)
    mean = torch.empty(channels, device=x.device, dtype=torch.float32)
    rstd = torch.empty_like(mean)
    var = torch.empty_like(mean)
    splits, blocks, per = _grid("forward", x, rows, channels, num_warps)
    work = torch.zeros(2 * channels + blocks, device=x.device, dtype=torch.float32)
    for phase in _phases():
        wrap_triton(_forward_kernel)[(splits, blocks)](
            x2, as_rows(y), weight, bias, mean, rstd, var, work, rows, channels, per, eps,
            PHASE=phase, TILE_ROWS=TILE_ROWS, TILE_CHANNELS=TILE_CHANNELS,
            num_warps=num_warps,
        )  # fmt: skip
    return y, mean, rstd, var


@triton_op(BACKWARD_OP, mutates_args=())
def persistent_bn_relu_backward(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    num_warps: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients (dx, dweight, dbias) of :func:`persistent_bn_relu` from its output's ``dy``."""
    dy = dy.contiguous(memory_format=torch.channels_last)
    x2 = as_rows(x)
    rows, channels = x2.shape
    dx = torch.empty_like(x)
    dweight = torch.empty(channels, device=x.device, dtype=torch.float32)
    dbias = torch.empty_like(dweight)
    splits, blocks, per = _grid("backward", x, rows, channels, num_warps)
    work = torch.zeros(2 * channels + blocks, device=x.device, dtype=torch.float32)
    for phase in _phases():
        wrap_triton(_backward_kernel)[(splits, blocks)](
            as_rows(dy), x2, as_rows(dx), weight, bias, mean, rstd, dweight, dbias, work, rows, channels, per,
            PHASE=phase, TILE_ROWS=TILE_ROWS, TILE_CHANNELS=TILE_CHANNELS,
            num_warps=num_warps,
        )  # fmt: skip
    return dx, dweight.to(weight.dtype), dbias.to(bias.dtype)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, ...]) -> None:
    x, weight, bias, _eps, num_warps = inputs
    _y, mean, rstd, _var = output
    ctx.save_for_backward(x, weight, bias, mean, rstd)
    ctx.num_warps = num_warps


def _backward(ctx: Any, dy: torch.Tensor, *_stats_grads: Any) -> tuple[torch.Tensor | None, ...]:
    x, weight, bias, mean, rstd = ctx.saved_tensors
    dx, dweight, dbias = persistent_bn_relu_backward(dy, x, weight, bias, mean, rstd, ctx.num_warps)
    return dx, dweight, dbias, None, None


persistent_bn_relu.register_autograd(_backward, setup_context=_setup_context)


def bn_relu(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    momentum: float,
    eps: float,
    num_warps: int | None = None,
) -> torch.Tensor:
    """``relu(batch_norm(x, training=True))`` with the running statistics updated as ``F.batch_norm`` does."""
    y, mean, _rstd, var = persistent_bn_relu(x, weight, bias, eps, NUM_WARPS if num_warps is None else num_warps)
    if running_mean is not None and running_var is not None:
        rows = x.numel() // x.shape[1]
        with torch.no_grad():
            running_mean.lerp_(mean.detach().to(running_mean.dtype), momentum)
            running_var.lerp_((var.detach() * (rows / max(rows - 1, 1))).to(running_var.dtype), momentum)
    return y
