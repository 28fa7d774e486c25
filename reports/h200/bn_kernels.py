"""ResNet-50's batch norms one at a time: inductor's kernels, hand-written Triton ones, and the traffic bound.

    python3 reports/h200/bn_kernels.py [--out FILE.json]        on a CUDA GPU (~2.5 minutes on an H200)
    python3 reports/h200/bn_kernels.py --check                  the Triton kernels against PyTorch, tiny shapes
                                                                (on a CPU through Triton's interpreter)

The question it answers (issue 15, docs/tune.md "Session 19"): the compiled ResNet-50 step spends 17.8-18.0 ms of
its ~32.7 ms in batch norm's kernels (normalization, reduction, element-wise), where a pass model of the traffic
batch norm needs (reports/h200/session19/bn_traffic.py) says 13.15 ms at 90% of the H200's bandwidth. Does
inductor move more than the model, or move it slowly, and can kernels of one's own do better? Each of ResNet-50's
distinct batch norm shapes (batch 256, fp16, channels-last; float32 weights as half-weights keeps them) is timed
forward + backward, as it trains:

* ``inductor``: ``F.batch_norm`` (training, running statistics) [+ identity] + ReLU compiled by torch.compile with
  the tuned recipe's inductor settings (tile_reductions, pointwise_autotune, combo_kernels);
* ``triton``: the same in six hand-written kernels over the tensor as a (rows = N*H*W, C) matrix: split column
  sums of x and x^2, their finalisation (mean, 1/std, running statistics), the apply (+ identity, ReLU); backward
  split column sums of the masked gradient and of it times x-hat, their finalisation, and the apply (dx, and the
  identity's gradient). The ReLU mask is recomputed from x where there is no identity, and read from the output
  where there is. On a GPU each shape keeps the fastest of a few tile shapes (``TILES``), and its result is compared
  with PyTorch's (``error``: the largest difference of the output and the gradients, relative in the norm);
* ``bound``: the pass model's bytes (8 passes, 12 with the identity) at the bandwidth a copy of the largest
  tensor reaches on this GPU.

Weighted by how many times ResNet-50 has each shape, the totals say how much of the step a fused batch norm
technique could take. Session 20 on an H200 (reports/h200/session20/bn-kernels-graphs.json): bound 13.51 ms,
inductor 17.47, these kernels 20.34, eager (cuDNN) 24.64; docs/tune.md "Session 20" reads it. Each pass is timed
as a CUDA graph's replays, as the compiled step runs it. The statistics use float32 sums of x and x^2, good enough
to time but to be replaced by Welford merges in a technique.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections import Counter
from typing import Any

if "cpu" in sys.argv or ("--check" in sys.argv and shutil.which("nvidia-smi") is None):
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: run the kernels on the CPU

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

EPS, MOMENTUM = 1e-5, 0.1


@triton.jit
def _col_sums(x_ptr, part_ptr, M, C, rows_per, BM: tl.constexpr, BC: tl.constexpr):
    """Partial column sums of x and x^2 over rows [s*rows_per, (s+1)*rows_per): part[s, 0:2, C]."""
    s, cb = tl.program_id(0), tl.program_id(1)
    cols = cb * BC + tl.arange(0, BC)
    cmask = cols < C
    acc = tl.zeros([BC], dtype=tl.float32)
    acc2 = tl.zeros([BC], dtype=tl.float32)
    start = s * rows_per
    for r in range(start, tl.minimum(start + rows_per, M), BM):
        rows = r + tl.arange(0, BM)
        m = (rows[:, None] < tl.minimum(start + rows_per, M)) & cmask[None, :]
        x = tl.load(x_ptr + rows[:, None] * C + cols[None, :], mask=m, other=0.0).to(tl.float32)
        acc += tl.sum(x, axis=0)
        acc2 += tl.sum(x * x, axis=0)
    tl.store(part_ptr + s * 2 * C + cols, acc, mask=cmask)
    tl.store(part_ptr + s * 2 * C + C + cols, acc2, mask=cmask)


@triton.jit
def _stats(part_ptr, mean_ptr, rstd_ptr, rmean_ptr, rvar_ptr, S, M, C, eps, momentum, BC: tl.constexpr):
    """Mean and 1/std per channel from the partial sums; the running statistics updated as batch norm does."""
    cols = tl.program_id(0) * BC + tl.arange(0, BC)
    cmask = cols < C
    acc = tl.zeros([BC], dtype=tl.float32)
    acc2 = tl.zeros([BC], dtype=tl.float32)
    for s in range(0, S):
        acc += tl.load(part_ptr + s * 2 * C + cols, mask=cmask, other=0.0)
        acc2 += tl.load(part_ptr + s * 2 * C + C + cols, mask=cmask, other=0.0)
    mean = acc / M
    var = tl.maximum(acc2 / M - mean * mean, 0.0)
    tl.store(mean_ptr + cols, mean, mask=cmask)
    tl.store(rstd_ptr + cols, 1.0 / tl.sqrt(var + eps), mask=cmask)
    rm = tl.load(rmean_ptr + cols, mask=cmask, other=0.0)
    rv = tl.load(rvar_ptr + cols, mask=cmask, other=0.0)
    tl.store(rmean_ptr + cols, (1 - momentum) * rm + momentum * mean, mask=cmask)
    tl.store(rvar_ptr + cols, (1 - momentum) * rv + momentum * var * M / (M - 1), mask=cmask)


@triton.jit
def _apply(
    x_ptr,
    id_ptr,
    y_ptr,
    mean_ptr,
    rstd_ptr,
    w_ptr,
    b_ptr,
    M,
    C,
    HAS_ID: tl.constexpr,
    BM: tl.constexpr,
    BC: tl.constexpr,
):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BC + tl.arange(0, BC)
    cmask = cols < C
    m = (rows[:, None] < M) & cmask[None, :]
    offs = rows[:, None] * C + cols[None, :]
    scale = tl.load(rstd_ptr + cols, mask=cmask, other=0.0) * tl.load(w_ptr + cols, mask=cmask, other=0.0)
    shift = tl.load(b_ptr + cols, mask=cmask, other=0.0) - tl.load(mean_ptr + cols, mask=cmask, other=0.0) * scale
    z = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32) * scale[None, :] + shift[None, :]
    if HAS_ID:
        z += tl.load(id_ptr + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, tl.maximum(z, 0.0).to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def _grad_sums(
    dy_ptr,
    x_ptr,
    y_ptr,
    mean_ptr,
    rstd_ptr,
    w_ptr,
    b_ptr,
    part_ptr,
    M,
    C,
    rows_per,
    HAS_ID: tl.constexpr,
    BM: tl.constexpr,
    BC: tl.constexpr,
):
    """Partial column sums of the masked gradient dz and of dz * x-hat: part[s, 0:2, C]."""
    s, cb = tl.program_id(0), tl.program_id(1)
    cols = cb * BC + tl.arange(0, BC)
    cmask = cols < C
    mean = tl.load(mean_ptr + cols, mask=cmask, other=0.0)
    rstd = tl.load(rstd_ptr + cols, mask=cmask, other=0.0)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0)
    b = tl.load(b_ptr + cols, mask=cmask, other=0.0)
    acc = tl.zeros([BC], dtype=tl.float32)
    acc2 = tl.zeros([BC], dtype=tl.float32)
    start = s * rows_per
    for r in range(start, tl.minimum(start + rows_per, M), BM):
        rows = r + tl.arange(0, BM)
        m = (rows[:, None] < tl.minimum(start + rows_per, M)) & cmask[None, :]
        offs = rows[:, None] * C + cols[None, :]
        xhat = (tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32) - mean[None, :]) * rstd[None, :]
        if HAS_ID:  # noqa: SIM108 - a compile-time branch of the kernel, as Triton writes them
            live = tl.load(y_ptr + offs, mask=m, other=0.0) > 0
        else:
            live = xhat * w[None, :] + b[None, :] > 0
        dz = tl.where(live & m, tl.load(dy_ptr + offs, mask=m, other=0.0).to(tl.float32), 0.0)
        acc += tl.sum(dz, axis=0)
        acc2 += tl.sum(dz * xhat, axis=0)
    tl.store(part_ptr + s * 2 * C + cols, acc, mask=cmask)
    tl.store(part_ptr + s * 2 * C + C + cols, acc2, mask=cmask)


@triton.jit
def _grad_stats(part_ptr, db_ptr, dw_ptr, S, C, BC: tl.constexpr):
    cols = tl.program_id(0) * BC + tl.arange(0, BC)
    cmask = cols < C
    acc = tl.zeros([BC], dtype=tl.float32)
    acc2 = tl.zeros([BC], dtype=tl.float32)
    for s in range(0, S):
        acc += tl.load(part_ptr + s * 2 * C + cols, mask=cmask, other=0.0)
        acc2 += tl.load(part_ptr + s * 2 * C + C + cols, mask=cmask, other=0.0)
    tl.store(db_ptr + cols, acc, mask=cmask)
    tl.store(dw_ptr + cols, acc2, mask=cmask)


@triton.jit
def _grad_apply(
    dy_ptr,
    x_ptr,
    y_ptr,
    dx_ptr,
    did_ptr,
    mean_ptr,
    rstd_ptr,
    w_ptr,
    b_ptr,
    db_ptr,
    dw_ptr,
    M,
    C,
    HAS_ID: tl.constexpr,
    BM: tl.constexpr,
    BC: tl.constexpr,
):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BC + tl.arange(0, BC)
    cmask = cols < C
    m = (rows[:, None] < M) & cmask[None, :]
    offs = rows[:, None] * C + cols[None, :]
    mean = tl.load(mean_ptr + cols, mask=cmask, other=0.0)
    rstd = tl.load(rstd_ptr + cols, mask=cmask, other=0.0)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0)
    b = tl.load(b_ptr + cols, mask=cmask, other=0.0)
    mdb = tl.load(db_ptr + cols, mask=cmask, other=0.0) / M
    mdw = tl.load(dw_ptr + cols, mask=cmask, other=0.0) / M
    xhat = (tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32) - mean[None, :]) * rstd[None, :]
    if HAS_ID:  # noqa: SIM108 - a compile-time branch of the kernel, as Triton writes them
        live = tl.load(y_ptr + offs, mask=m, other=0.0) > 0
    else:
        live = xhat * w[None, :] + b[None, :] > 0
    dz = tl.where(live, tl.load(dy_ptr + offs, mask=m, other=0.0).to(tl.float32), 0.0)
    dx = (w * rstd)[None, :] * (dz - mdb[None, :] - xhat * mdw[None, :])
    tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=m)
    if HAS_ID:
        tl.store(did_ptr + offs, dz.to(did_ptr.dtype.element_ty), mask=m)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """A channels-last (N, C, H, W) tensor as its (N*H*W, C) row-major matrix, without a copy."""
    n, c, h, w = t.shape
    if not t.is_contiguous(memory_format=torch.channels_last):
        raise ValueError("the hand-written batch norm takes channels-last tensors")
    return t.permute(0, 2, 3, 1).reshape(n * h * w, c)


def _splits(m: int, c: int, bm: int, bc: int, device: torch.device) -> tuple[int, int]:
    """How many row splits (and rows each) give the column sums about four programs per SM."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    splits = max(1, min(triton.cdiv(m, bm), 4 * sms // triton.cdiv(c, bc)))
    per = triton.cdiv(triton.cdiv(m, splits), bm) * bm
    return triton.cdiv(m, per), per


class BatchNormReLU(torch.autograd.Function):
    """relu(batch_norm(x) [+ identity]) in training, channels-last, with the six kernels above."""

    BM, BC, WARPS = 64, 64, 4  # tile rows, tile channels, warps a program: set by the caller's sweep

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        identity: torch.Tensor | None,
        running_mean: torch.Tensor,
        running_var: torch.Tensor,
    ) -> torch.Tensor:
        bm, bc, nw = BatchNormReLU.BM, BatchNormReLU.BC, BatchNormReLU.WARPS
        x2 = _rows(x)
        m, c = x2.shape
        s, per = _splits(m, c, bm, bc, x.device)
        part = torch.empty(s, 2, c, device=x.device, dtype=torch.float32)
        mean = torch.empty(c, device=x.device, dtype=torch.float32)
        rstd = torch.empty_like(mean)
        _col_sums[(s, triton.cdiv(c, bc))](x2, part, m, c, per, BM=bm, BC=bc, num_warps=nw)
        _stats[(triton.cdiv(c, bc),)](part, mean, rstd, running_mean, running_var, s, m, c, EPS, MOMENTUM, BC=bc)
        y = torch.empty_like(x)
        has_id = identity is not None
        id2 = _rows(identity) if identity is not None else x2
        _apply[(triton.cdiv(m, bm), triton.cdiv(c, bc))](
            x2, id2, _rows(y), mean, rstd, weight, bias, m, c, HAS_ID=has_id, BM=bm, BC=bc, num_warps=nw
        )
        ctx.has_id = has_id
        ctx.save_for_backward(x, y if has_id else x, weight, bias, mean, rstd)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        bm, bc, nw = BatchNormReLU.BM, BatchNormReLU.BC, BatchNormReLU.WARPS
        x, y, weight, bias, mean, rstd = ctx.saved_tensors
        dy = dy.contiguous(memory_format=torch.channels_last)
        x2, y2, dy2 = _rows(x), _rows(y), _rows(dy)
        m, c = x2.shape
        s, per = _splits(m, c, bm, bc, x.device)
        part = torch.empty(s, 2, c, device=x.device, dtype=torch.float32)
        _grad_sums[(s, triton.cdiv(c, bc))](
            dy2, x2, y2, mean, rstd, weight, bias, part, m, c, per, HAS_ID=ctx.has_id, BM=bm, BC=bc, num_warps=nw
        )
        db = torch.empty(c, device=x.device, dtype=torch.float32)
        dw = torch.empty_like(db)
        _grad_stats[(triton.cdiv(c, bc),)](part, db, dw, s, c, BC=bc)
        dx = torch.empty_like(x)
        did = torch.empty_like(x) if ctx.has_id else None
        _grad_apply[(triton.cdiv(m, bm), triton.cdiv(c, bc))](
            dy2,
            x2,
            y2,
            _rows(dx),
            _rows(did) if did is not None else x2,
            mean,
            rstd,
            weight,
            bias,
            db,
            dw,
            m,
            c,
            HAS_ID=ctx.has_id,
            BM=bm,
            BC=bc,
            num_warps=nw,
        )
        return dx, dw, db, did, None, None


def reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    identity: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
) -> torch.Tensor:
    z = F.batch_norm(x, running_mean, running_var, weight, bias, training=True, momentum=MOMENTUM, eps=EPS)
    return F.relu(z if identity is None else z + identity)


def shapes() -> Counter[tuple[int, int, int, bool]]:
    """(C, H, W, has identity) of each batch norm of torchvision's ResNet-50, counted."""
    from torchvision.models import resnet50

    with torch.device("meta"):
        model = resnet50()
    seen: Counter[tuple[int, int, int, bool]] = Counter()

    def hook(name: str) -> Any:
        def record(module: Any, inputs: Any, output: torch.Tensor) -> None:
            _, c, h, w = output.shape
            seen[(c, h, w, name.endswith("bn3"))] += 1  # bn3's output meets the identity, then the ReLU

        return record

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.register_forward_hook(hook(name))
    model(torch.empty(1, 3, 224, 224, device="meta"))
    # The downsampling batch norm has neither identity nor ReLU; it is timed as a batch norm + ReLU (one mask more).
    return seen


def _inputs(n: int, c: int, h: int, w: int, has_id: bool, device: str, dtype: torch.dtype) -> list[Any]:
    def act() -> torch.Tensor:
        return torch.randn(n, c, h, w, device=device).to(dtype).contiguous(memory_format=torch.channels_last)

    x = act().requires_grad_()
    weight = (1 + 0.1 * torch.randn(c, device=device)).requires_grad_()
    bias = (0.1 * torch.randn(c, device=device)).requires_grad_()
    identity = act().requires_grad_() if has_id else None
    return [x, weight, bias, identity, torch.zeros(c, device=device), torch.ones(c, device=device)]


def _twin(t: torch.Tensor | None) -> torch.Tensor | None:
    """A copy of an input for the reference, in the same memory format, a leaf as the original is."""
    if t is None:
        return None
    return t.detach().clone(memory_format=torch.preserve_format).requires_grad_(t.requires_grad)


def _compared(ours: list[Any], theirs: list[Any], grad: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Forward + backward of the hand-written kernels on ``ours`` and of PyTorch on ``theirs`` (twin inputs): each
    output, running statistic and gradient beside PyTorch's, by name, in float32."""
    a, b = BatchNormReLU.apply(*ours), reference(*theirs)
    a.backward(grad)
    b.backward(grad)
    pairs = {"y": (a, b), "running_mean": (ours[4], theirs[4]), "running_var": (ours[5], theirs[5])}
    for name, i in (("dx", 0), ("dweight", 1), ("dbias", 2), ("didentity", 3)):
        if ours[i] is not None:
            pairs[name] = (ours[i].grad, theirs[i].grad)
    return {name: (p.detach().float(), q.detach().float()) for name, (p, q) in pairs.items()}


def _agreement(args: list[Any], grad: torch.Tensor) -> float:
    """The largest relative difference between the hand-written kernels and PyTorch: output and gradients.

    Relative in the Frobenius norm, ||ours - theirs|| / ||theirs||: in float16 a few of a shape's elements sit at
    z = 0 within rounding, and where the two round the other way the ReLU mask flips and their gradient differs
    by a whole dy. A largest-element measure reads that as 0.3-0.8 (session 20's first run); the norm weighs it by
    how few they are.
    """
    pairs = _compared([_twin(t) for t in args], [_twin(t) for t in args], grad)
    return max(
        float((p - q).norm() / (q.norm() + 1e-6)) for name, (p, q) in pairs.items() if not name.startswith("running_")
    )


def check() -> int:
    """The hand-written kernels against PyTorch's batch norm, forward and backward, on small shapes."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.float16 if device == "cuda" else torch.float32
    worst = 0.0
    # one program's rows in one tile; several row splits; splits of several tiles each; channels past a tile
    cases = [
        (2, 8, 5, 3, False),
        (3, 70, 4, 4, True),
        (4, 64, 7, 7, False),
        (8, 16, 12, 12, True),
        (2, 130, 3, 5, True),
    ]
    for n, c, h, w, has_id in cases:
        ours = _inputs(n, c, h, w, has_id, device, dtype)
        theirs = [_twin(t) for t in ours]
        grad = torch.randn(n, c, h, w, device=device).to(dtype).contiguous(memory_format=torch.channels_last)
        for name, (p, q) in _compared(ours, theirs, grad).items():
            err = float((p - q).abs().max() / (q.abs().max() + 1e-6))
            worst = max(worst, err)
            print(f"{(n, c, h, w, has_id)} {name}: relative max error {err:.2e}")
    limit = 2e-2 if dtype == torch.float16 else 1e-4
    print(f"worst {worst:.2e} (limit {limit:.0e})")
    return 0 if worst < limit else 1


def _clock(device: str) -> Any:
    """Seconds since an arbitrary start, after the device's queued work: CUDA events on a GPU, perf_counter else."""
    import time

    def now() -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    return now


def _clear(args: list[Any]) -> None:
    for t in args:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            t.grad = None


def _time(fn: Any, args: list[Any], grad: torch.Tensor, device: str, iters: int) -> float:
    """Median seconds of forward + backward, gradients cleared between steps as a training step does.

    On a GPU the pass is captured in a CUDA graph and its replays are timed: the GPU's time with the gaps between
    kernels that a graph has, as the compiled step (reduce-overhead) runs them. Timed from the host instead, a
    small shape measures Python and kernel launches (session 20's first run: 0.5-0.9 ms for shapes the traffic
    bound puts at 0.02-0.2 ms).
    """
    warmup = min(5, iters)
    if device == "cuda":
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                _clear(args)
                fn(*args).backward(grad)
        torch.cuda.current_stream().wait_stream(side)
        _clear(args)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(*args).backward(grad)
        for _ in range(warmup):
            graph.replay()
        times = []
        for _ in range(iters):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end) / 1e3)
        del graph
        return sorted(times)[len(times) // 2]
    now = _clock(device)
    times = []
    for i in range(iters + warmup):
        _clear(args)
        t0 = now()
        fn(*args).backward(grad)
        if i >= warmup:
            times.append(now() - t0)
    return sorted(times)[len(times) // 2]


def bench(out: str | None, dev: str, n: int, iters: int) -> None:
    import torch._dynamo
    import torch._inductor.config as inductor

    inductor_settings = {
        "triton.tile_reductions": True,
        "triton.prefer_nd_tiling": True,
        "max_autotune_pointwise": True,
        "combo_kernels": True,
    }
    inductor_settings = {k: v for k, v in inductor_settings.items() if _has(inductor, k)}
    # one graph per shape and identity: 16 of them, past dynamo's default limit of 8 recompilations of one function
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 64)
    compiled = torch.compile(reference, options=inductor_settings, dynamic=False)
    dtype = torch.float16 if dev == "cuda" else torch.float32  # Triton's interpreter on a CPU: float32
    big = torch.empty(n * 256 * 56 * 56, device=dev, dtype=dtype)
    dst = torch.empty_like(big)
    copy = min(_copy_time(dst, big, dev) for _ in range(5))
    bandwidth = 2 * big.numel() * dtype.itemsize / copy
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    print(f"{name} torch {torch.__version__}; batch {n}; copy bandwidth {bandwidth / 1e12:.2f} TB/s")
    rows, totals = [], Counter[str]()
    for (c, h, w, has_id), count in sorted(shapes().items()):
        args = _inputs(n, c, h, w, has_id, dev, dtype)
        grad = torch.randn(n, c, h, w, device=dev).to(dtype).contiguous(memory_format=torch.channels_last)
        passes = 12 if has_id else 8
        row = {
            "C": c,
            "H": h,
            "W": w,
            "identity": has_id,
            "count": count,
            "bound": passes * n * c * h * w * dtype.itemsize / bandwidth,
            "inductor": _time(compiled, args, grad, dev, iters),
            **_best_tiles(args, grad, dev, iters),
            "eager": _time(reference, args, grad, dev, iters),
            "error": _agreement(args, grad),  # with the tiles tried last
        }
        rows.append(row)
        for k in ("bound", "inductor", "triton", "eager"):
            totals[k] += row[k] * count
        print(" ".join(_shown(k, v, timed=k in totals) for k, v in row.items()))
    print(f"ResNet-50 at batch {n}, weighted: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in totals.items()))
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "device": name,
                    "batch": n,
                    "torch": torch.__version__,
                    "bandwidth": bandwidth,
                    "rows": rows,
                    "totals": dict(totals),
                },
                f,
                indent=1,
            )


TILES = [(64, 64, 4), (128, 64, 8), (32, 128, 4), (64, 128, 8), (256, 32, 8)]
"""(rows, channels, warps) of the hand-written kernels' tiles tried on a GPU, inductor's autotuning by hand."""


def _best_tiles(args: list[Any], grad: torch.Tensor, dev: str, iters: int) -> dict[str, Any]:
    best: dict[str, Any] = {}
    for bm, bc, nw in TILES if dev == "cuda" else TILES[:1]:
        BatchNormReLU.BM, BatchNormReLU.BC, BatchNormReLU.WARPS = bm, bc, nw
        seconds = _time(BatchNormReLU.apply, args, grad, dev, iters)
        if not best or seconds < best["triton"]:
            best = {"triton": seconds, "tiles": [bm, bc, nw]}
    return best


def _shown(key: str, value: Any, *, timed: bool) -> str:
    if timed:
        return f"{key} {value * 1e3:.3f} ms"
    return f"{key} {value:.1e}" if key == "error" else f"{key} {value}"


def _has(config: Any, dotted: str) -> bool:
    *parents, leaf = dotted.split(".")
    for p in parents:
        config = getattr(config, p, None)
    return config is not None and hasattr(config, leaf)


def _copy_time(dst: torch.Tensor, src: torch.Tensor, device: str) -> float:
    now = _clock(device)
    t0 = now()
    for _ in range(10):
        dst.copy_(src)
    return (now() - t0) / 10


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="the kernels against PyTorch on small shapes")
    parser.add_argument("--out", help="write the figures as JSON")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--iters", type=int, default=30, help="timed steps of each (after up to 5 untimed)")
    parser.add_argument("--device", default="cuda", help="cuda; cpu (with Triton's interpreter) only tries the code")
    args = parser.parse_args()
    if args.check:
        return check()
    bench(args.out, args.device, args.batch, args.iters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
