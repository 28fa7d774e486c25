"""The torch-dependent part of :mod:`ampsuite_resnet_kernels.cudnn_batch_norm` (imported when a cell applies it).

Two custom operators, forward and backward, so that neither AOTAutograd nor
inductor looks inside: ``aten.cudnn_batch_norm`` itself has a decomposition that
AOTAutograd applies above autograd, which is exactly what this avoids.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from ampsuite import SkipCell, TrainStep
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from ampsuite_resnet_kernels._fx_patterns import INT32_MAX
from ampsuite_resnet_kernels._layout import kept_layout

if TYPE_CHECKING:
    from ampsuite_resnet_kernels.cudnn_batch_norm import CudnnBatchNormOptions

OP = "ampsuite_resnet_kernels::batch_norm"
BACKWARD_OP = "ampsuite_resnet_kernels::batch_norm_backward"
BATCH_NORMS: tuple[type[_BatchNorm], ...] = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
"""Module types whose training forward becomes the operator (``SyncBatchNorm`` is none of them)."""

_MARK = "_ampsuite_cudnn_batch_norm"


def _reserve_size(x: Tensor) -> int:
    """Bytes cuDNN keeps from the forward for the backward (0 outside CUDA)."""
    if x.device.type != "cuda":
        return 0
    return int(torch._C._get_cudnn_batch_norm_reserve_space_size(x, True))  # type: ignore[attr-defined]


# Functional (no mutated arguments): PyTorch registers autograd formulas only for functional custom operators. The
# running statistics are updated on copies that come back as outputs; the module copies them into its buffers.
@torch.library.custom_op(OP, mutates_args=())
def batch_norm(
    x: Tensor,
    weight: Tensor,
    bias: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    momentum: float,
    eps: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Training-mode batch norm.

    Returns (output, saved mean, saved inverse std, cuDNN's reserve space, new running mean, new running var).
    """
    running_mean, running_var = running_mean.clone(), running_var.clone()
    if x.device.type == "cuda":
        y, mean, invstd, reserve = torch.ops.aten.cudnn_batch_norm.default(
            x, weight, bias, running_mean, running_var, True, momentum, eps
        )
        return y, mean, invstd, reserve, running_mean, running_var
    y, mean, invstd = torch.ops.aten.native_batch_norm.default(
        x, weight, bias, running_mean, running_var, True, momentum, eps
    )
    return y, mean, invstd, x.new_empty((0,), dtype=torch.uint8), running_mean, running_var


@batch_norm.register_fake
def _batch_norm_fake(
    x: Tensor,
    weight: Tensor,
    bias: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    momentum: float,
    eps: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    channels = x.shape[1]
    y = torch.empty_like(x, memory_format=kept_layout(x))
    mean = x.new_empty((channels,), dtype=weight.dtype)
    invstd = x.new_empty((channels,), dtype=weight.dtype)
    reserve = x.new_empty((_reserve_size(x),), dtype=torch.uint8)
    return y, mean, invstd, reserve, torch.empty_like(running_mean), torch.empty_like(running_var)


@torch.library.custom_op(BACKWARD_OP, mutates_args=())
def batch_norm_backward(
    grad_out: Tensor,
    x: Tensor,
    weight: Tensor,
    save_mean: Tensor,
    save_invstd: Tensor,
    reserve: Tensor,
    eps: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of :func:`batch_norm` for input, weight and bias."""
    if x.device.type == "cuda":
        # cuDNN wants the gradient in the input's layout (a no-op when the autograd formula already made it so).
        grad_out = grad_out.contiguous(memory_format=kept_layout(x))
        grad_x, grad_weight, grad_bias = torch.ops.aten.cudnn_batch_norm_backward.default(
            x, grad_out, weight, None, None, save_mean, save_invstd, eps, reserve
        )
        return grad_x, grad_weight, grad_bias
    grad_x, grad_weight, grad_bias = torch.ops.aten.native_batch_norm_backward.default(
        grad_out, x, weight, None, None, save_mean, save_invstd, True, eps, [True, True, True]
    )
    return grad_x, grad_weight, grad_bias


@batch_norm_backward.register_fake
def _batch_norm_backward_fake(
    grad_out: Tensor,
    x: Tensor,
    weight: Tensor,
    save_mean: Tensor,
    save_invstd: Tensor,
    reserve: Tensor,
    eps: float,
) -> tuple[Tensor, Tensor, Tensor]:
    return torch.empty_like(x, memory_format=kept_layout(x)), torch.empty_like(weight), torch.empty_like(weight)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
    x, weight, _bias, _running_mean, _running_var, _momentum, eps = inputs
    _y, mean, invstd, reserve, _new_mean, _new_var = output
    ctx.save_for_backward(x, weight, mean, invstd, reserve)
    ctx.eps = eps


def _backward(ctx: Any, grad_y: Tensor, *_stats_grads: Any) -> tuple[Tensor | None, ...]:
    x, weight, mean, invstd, reserve = ctx.saved_tensors
    # Here, not only inside the operator: this formula is traced, so inductor sees the layout cuDNN needs and
    # can write the gradient in it, instead of the operator copying it on every call.
    grad_y = grad_y.contiguous(memory_format=kept_layout(x))
    grad_x, grad_weight, grad_bias = batch_norm_backward(grad_y, x, weight, mean, invstd, reserve, ctx.eps)
    return grad_x, grad_weight, grad_bias, None, None, None, None


batch_norm.register_autograd(_backward, setup_context=_setup_context)


def _eligible(module: _BatchNorm, x: Tensor) -> bool:
    """Whether this call is one the operator computes exactly as ``nn.BatchNorm`` would."""
    return bool(
        module.training
        and module.track_running_stats
        and module.running_mean is not None
        and module.affine
        and module.momentum is not None  # None means a cumulative average, which nn.BatchNorm computes in Python
        and x.dim() >= 3  # cuDNN's spatial modes; (N, C) input stays with PyTorch
        and x.numel() <= INT32_MAX  # cuDNN indexes with 32-bit integers (as aten's own dispatch checks)
    )


def replace(module: _BatchNorm) -> bool:
    """Route ``module``'s training forward through the operator; False if it already is."""
    if getattr(module, _MARK, False):
        return False
    original: Callable[[Tensor], Tensor] = module.forward

    @functools.wraps(original)
    def forward(x: Tensor) -> Tensor:
        if not _eligible(module, x):
            return original(x)
        assert module.running_mean is not None and module.running_var is not None  # _eligible checked
        assert module.num_batches_tracked is not None and module.momentum is not None
        module._check_input_dim(x)
        module.num_batches_tracked.add_(1)
        x = x.contiguous(memory_format=kept_layout(x))
        y, _mean, _invstd, _reserve, running_mean, running_var = batch_norm(
            x, module.weight, module.bias, module.running_mean, module.running_var, module.momentum, module.eps
        )
        with torch.no_grad():
            module.running_mean.copy_(running_mean)
            module.running_var.copy_(running_var)
        return y

    module.forward = forward  # type: ignore[method-assign,assignment]
    setattr(module, _MARK, True)
    return True


def refusal(device: torch.device, dtype: torch.dtype) -> str | None:
    """cuDNN's own words when it will not normalise ``dtype`` input on ``device`` (None when it will)."""
    if device.type != "cuda":
        return None
    x = torch.ones((2, 3, 4, 4), device=device, dtype=dtype)
    stats = torch.zeros(3, device=device), torch.ones(3, device=device)
    try:
        torch.ops.aten.cudnn_batch_norm.default(x, stats[1], stats[0], stats[0], stats[1], True, 0.1, 1e-5)
    except RuntimeError as exc:
        return str(exc).strip().splitlines()[0]
    return None


def apply(step: TrainStep, options: CudnnBatchNormOptions) -> TrainStep:
    if step.model is None:
        raise SkipCell("cudnn-batch-norm needs a workload with a model")
    modules = [m for m in step.model.modules() if isinstance(m, BATCH_NORMS)]
    if not modules:
        raise SkipCell("cudnn-batch-norm found no BatchNorm1d/2d/3d module in this workload's model")
    weights = {str(m.weight.dtype) for m in modules if m.weight is not None}
    if weights - {"torch.float32"}:
        # cuDNN takes float16 input only with float32 weights (aten's own dispatch requires the same).
        raise SkipCell(f"cudnn-batch-norm needs float32 batch-norm weights, found {', '.join(sorted(weights))}")
    dtype = step.autocast_dtype or torch.float32
    reason = refusal(step.device, dtype)
    if reason is not None:
        raise SkipCell(f"cudnn-batch-norm: cuDNN refuses {dtype} input on this build: {reason}")
    replaced = sum(replace(m) for m in modules)
    step.notes["cudnn_batch_norm"] = {
        "modules": replaced,
        "kernel": "cudnn" if step.device.type == "cuda" else "native",
        "input_dtype": str(dtype).removeprefix("torch."),
    }
    return step
