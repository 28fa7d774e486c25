"""The training step as a user writes it by hand, from a built step's own objects: what ``ampsuite selfcheck``
times the harness against (eager, a hand-captured CUDA graph, Apex-O2-style half weights with a loss scale)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ampsuite.contract.step import Batch, TrainStep

__all__ = ["NotComparable", "plain_graph_step", "plain_half_step", "plain_step"]


class NotComparable(ValueError):
    """The recipe has no plain-loop twin here (a wrapping technique, a GradScaler in a hand-captured graph)."""


def plain_step(step: TrainStep) -> Callable[[Batch], Any]:
    """The training step as a user writes it, from the step's own objects."""
    model, optimizer, loss_fn, scaler = step.model, step.optimizer, step.loss_fn, step.scaler
    dtype, device_type = step.autocast_dtype, step.device.type
    if model is None or optimizer is None or loss_fn is None:
        # A workload without a model is a raw product (GEMM): the plain loop is
        # a bare torch.matmul on the same operands.
        def product(batch: Batch) -> Any:
            with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
                return torch.matmul(*batch.inputs)

        return product

    def train_step(batch: Batch) -> Any:
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(model(*batch.inputs), batch.target)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return train_step


def plain_graph_step(step: TrainStep, example: Batch) -> Callable[[Batch], Any]:
    """The whole training step captured into one CUDA graph by hand, as PyTorch's documentation shows."""
    model, optimizer, loss_fn, dtype = step.model, step.optimizer, step.loss_fn, step.autocast_dtype
    if model is None or optimizer is None or loss_fn is None or step.scaler is not None:
        raise NotComparable("a hand-captured plain loop needs a model, an optimizer and no GradScaler")
    for group in optimizer.param_groups:
        if "capturable" in group:
            group["capturable"] = True
    static = Batch(tuple(t.clone() for t in example.inputs), None if example.target is None else example.target.clone())

    def body() -> Any:
        with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(model(*static.inputs), static.target)
        loss.backward()
        optimizer.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    optimizer.zero_grad(set_to_none=True)  # grads allocated inside the capture are overwritten on each replay
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = body()

    def replay(batch: Batch) -> Any:
        for dst, src in zip(static.inputs, batch.inputs, strict=True):
            dst.copy_(src, non_blocking=True)
        if static.target is not None and batch.target is not None:
            static.target.copy_(batch.target, non_blocking=True)
        graph.replay()
        return static_loss

    return replay


def _grad(p: torch.Tensor) -> torch.Tensor:
    if p.grad is None:  # the harness skips such a master; the hand-written loop does not
        raise NotComparable("a parameter got no gradient; the half-weights plain loop steps every master")
    return p.grad


def plain_half_step(step: TrainStep, dtype: torch.dtype, init_scale: float) -> Callable[[Batch], Any]:
    """Apex's O2 written by hand on a step built without half-weights.

    The model goes to ``dtype`` but for its batch norms; each parameter the
    optimizer holds is replaced there by a float32 master (its state moves
    along, so a fused optimizer's started momentum stays), and float16 gets a
    dynamic loss scale.
    """
    model, optimizer, loss_fn = step.model, step.optimizer, step.loss_fn
    if model is None or optimizer is None or loss_fn is None:
        raise NotComparable("a half-weights plain loop needs a model, a loss and an optimizer")
    if step.autocast_dtype is not None or step.scaler is not None:
        raise NotComparable("a half-weights plain loop replaces autocast and its loss scale")
    module = getattr(model, "_orig_mod", model)  # torch.compile compiles lazily, at the first call
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            continue
        for p in m.parameters(recurse=False):
            p.data = p.data.to(dtype)
        for name, b in m.named_buffers(recurse=False):
            if b.is_floating_point():
                setattr(m, name, b.to(dtype))
    halves: list[torch.Tensor] = []
    masters: list[torch.Tensor] = []
    for group in optimizer.param_groups:
        for i, half in enumerate(group["params"]):
            master = nn.Parameter(half.detach().float().clone())
            group["params"][i] = master
            if half in optimizer.state:
                optimizer.state[master] = optimizer.state.pop(half)
            halves.append(half)
            masters.append(master)
    grads = [torch.zeros_like(m) for m in masters]
    for kept, grad in zip(masters, grads, strict=True):
        kept.grad = grad
    # torch._foreach_copy_ takes its fast path for one dtype on each side: the half weights, and batch norm's float32
    by_dtype: dict[torch.dtype, list[int]] = {}
    for i, p in enumerate(halves):
        by_dtype.setdefault(p.dtype, []).append(i)
    scaler = torch.amp.GradScaler(step.device.type, init_scale=init_scale) if dtype == torch.float16 else None

    def train_step(batch: Batch) -> Any:
        inputs = tuple(t.to(dtype) if t.is_floating_point() else t for t in batch.inputs)
        out = model(*inputs)
        if not isinstance(out, torch.Tensor):
            raise NotComparable(f"the model returns {type(out).__name__}; the half-weights plain loop takes a tensor")
        loss = loss_fn(out.float(), batch.target)
        if scaler is not None:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        with torch.no_grad():
            for idx in by_dtype.values():
                torch._foreach_copy_([grads[i] for i in idx], [_grad(halves[i]) for i in idx])
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            for idx in by_dtype.values():
                torch._foreach_copy_([halves[i] for i in idx], [masters[i] for i in idx])
        for p in halves:
            p.grad = None
        return loss

    return train_step
