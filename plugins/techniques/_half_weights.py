"""The torch-dependent part of :mod:`ampsuite.plugins.techniques.half_weights` (imported on first use)."""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from ampsuite import Batch, SkipCell, TrainStep
from ampsuite.plugins.techniques._optimizer import rebuilt_optimizer
from ampsuite.plugins.techniques.half_weights import HalfWeightsOptions

__all__ = ["DTYPES", "apply", "cast_inputs", "half_dtype"]

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def half_dtype(step: TrainStep) -> torch.dtype | None:
    """The dtype ``half-weights`` converted the step's model to, or None."""
    name = step.notes.get("half_weights", {}).get("dtype")
    return DTYPES.get(name) if isinstance(name, str) else None


def cast_inputs(batch: Batch, dtype: torch.dtype | None) -> tuple[torch.Tensor, ...]:
    """The batch's floating inputs in ``dtype`` (token ids and other integers untouched)."""
    if dtype is None:
        return batch.inputs
    return tuple(t.to(dtype) if t.is_floating_point() else t for t in batch.inputs)


def _to_float(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() else value
    if isinstance(value, tuple | list):
        return type(value)(_to_float(v) for v in value)
    return value


@torch.no_grad()
def _copy(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
    """``dst[i].copy_(src[i])`` as one foreach copy per pair of dtypes (the fast foreach path wants one each)."""
    groups: dict[tuple[torch.dtype, torch.dtype], tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
    for d, s in zip(dst, src, strict=True):
        to, of = groups.setdefault((d.dtype, s.dtype), ([], []))
        to.append(d)
        of.append(s)
    for to, of in groups.values():
        torch._foreach_copy_(to, of)


def apply(step: TrainStep, options: HalfWeightsOptions) -> TrainStep:
    model, optimizer = step.model, step.optimizer
    if model is None or optimizer is None or step.loss_fn is None:
        raise SkipCell("half-weights needs a workload with a model, a loss and an optimizer")
    if step.autocast_dtype is not None:
        raise SkipCell("half-weights replaces autocast: the step already autocasts")
    dtype = DTYPES[options.dtype]
    norms = (nn.modules.batchnorm._BatchNorm,)
    kept = 0
    for module in model.modules():
        if isinstance(module, norms):
            kept += 1
            continue
        # Only this module's own tensors; batch norm children stay float32.
        for p in module.parameters(recurse=False):
            p.data = p.data.to(dtype)
        for name, b in module.named_buffers(recurse=False):
            if b.is_floating_point():
                setattr(module, name, b.to(dtype))

    def forward(batch: Batch) -> Any:
        assert step.model is not None
        return _to_float(step.model(*cast_inputs(batch, dtype)))

    step.forward = forward
    if not options.master_weights:
        return _without_masters(step, options, kept)
    masters: dict[int, nn.Parameter] = {}
    pairs: list[tuple[nn.Parameter, nn.Parameter]] = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in masters:
                masters[id(p)] = nn.Parameter(p.detach().float().clone())
                pairs.append((p, masters[id(p)]))
    step.optimizer = rebuilt_optimizer(optimizer, lambda p: masters[id(p)])
    scaler = None
    if dtype == torch.float16:
        scaler = torch.amp.GradScaler(step.device.type, init_scale=options.init_scale)
    step.scaler = scaler

    def forward_backward(batch: Batch) -> torch.Tensor:
        assert step.loss_fn is not None
        loss: torch.Tensor = step.loss_fn(forward(batch), batch.target)
        if step.scaler is not None:
            step.scaler.scale(loss).backward()
        else:
            loss.backward()
        return loss.detach()

    halves: list[torch.Tensor] = [p for p, _ in pairs]
    fp32: list[torch.Tensor] = [m for _, m in pairs]
    # The masters' gradients, kept from step to step and overwritten: one foreach copy per dtype instead of a
    # cast kernel per parameter (161 for ResNet-50, each a launch and a gap in a CUDA graph).
    master_grads: list[torch.Tensor] = []

    def update() -> None:
        opt = step.optimizer
        assert opt is not None
        grads = [p.grad for p in halves]
        if all(g is not None for g in grads):
            if not master_grads:
                master_grads.extend(torch.empty_like(m) for m in fp32)
            _copy(master_grads, cast(list[torch.Tensor], grads))
            for master, grad in zip(fp32, master_grads, strict=True):
                master.grad = grad
        else:  # a parameter without a gradient this step: the optimizer must skip its master too
            for master, g in zip(fp32, grads, strict=True):
                master.grad = None if g is None else g.to(torch.float32)
        if step.scaler is not None:
            step.scaler.step(opt)
            step.scaler.update()
        else:
            opt.step()
        _copy(halves, fp32)
        for p in halves:
            p.grad = None

    step.forward_backward = forward_backward
    step.update = update
    step.notes["half_weights"] = {
        "dtype": options.dtype,
        "master_weights": "float32",
        "batchnorm_fp32": kept,
        "params": len(pairs),
        "master_bytes": sum(m.numel() * 4 for _, m in pairs),
        "loss_scale": "dynamic GradScaler" if scaler is not None else None,
    }
    return step


def _without_masters(step: TrainStep, options: HalfWeightsOptions, kept: int) -> TrainStep:
    """bfloat16 weights that the optimizer, rebuilt over them as they now are, updates in place."""
    assert step.optimizer is not None and step.model is not None
    step.optimizer = rebuilt_optimizer(step.optimizer)
    step.scaler = None
    step.notes["half_weights"] = {
        "dtype": options.dtype,
        "master_weights": None,
        "batchnorm_fp32": kept,
        "params": sum(1 for g in step.optimizer.param_groups for _ in g["params"]),
        "master_bytes": 0,
        "loss_scale": None,
    }
    forward = step.forward
    assert forward is not None

    def forward_backward(batch: Batch) -> torch.Tensor:
        assert step.loss_fn is not None
        loss: torch.Tensor = step.loss_fn(forward(batch), batch.target)
        loss.backward()
        return loss.detach()

    step.forward_backward = forward_backward
    return step
