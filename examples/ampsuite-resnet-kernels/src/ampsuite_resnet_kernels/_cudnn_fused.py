"""cudnn-batch-norm's ``fuse`` option: batch norm with the ReLU and residual add that follow it, in one cuDNN call.

Three pieces, data flowing one way:

* the operators ``ampsuite_resnet_kernels::fused_batch_norm`` and its backward: ``y = act(bn(x) [+ z])`` through
  cuDNN's Ex calls (:mod:`._cudnn_api`) on CUDA, through PyTorch's native kernels elsewhere (the same arithmetic,
  which is what the CPU tests hold the plumbing to);
* :class:`FusedBatchNorm2d`, a ``BatchNorm2d`` over the very same parameters and buffers whose forward takes
  the residual and applies the ReLU;
* :func:`fuse_model`, which traces the model with ``torch.fx``, finds each ``BatchNorm2d -> ReLU`` and
  ``BatchNorm2d -> add -> ReLU`` and rewrites it into one call of that module.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from ampsuite import SkipCell, TrainStep
from torch import Tensor, fx, nn

from ampsuite_resnet_kernels import _cudnn_api as api
from ampsuite_resnet_kernels._fx_patterns import AdoptedBatchNorm2d, is_relu, only_user, trace
from ampsuite_resnet_kernels._layout import kept_layout

OP = "ampsuite_resnet_kernels::fused_batch_norm"
BACKWARD_OP = "ampsuite_resnet_kernels::fused_batch_norm_backward"
OPS_NAMES = {api.OPS_BN: "bn", api.OPS_BN_RELU: "bn+relu", api.OPS_BN_ADD_RELU: "bn+add+relu"}


def _cudnn(x: Tensor) -> bool:
    return x.device.type == "cuda"


def _layout(x: Tensor) -> torch.memory_format:
    """The layout of every activation-shaped output: cuDNN's NHWC on CUDA, the input's own elsewhere."""
    return torch.channels_last if _cudnn(x) else kept_layout(x)


# Functional: PyTorch registers autograd formulas only for operators that mutate nothing. The running
# statistics are therefore the module's to update, from the saved mean and inverse std the operator returns.
@torch.library.custom_op(OP, mutates_args=())
def fused_batch_norm(
    x: Tensor, z: Tensor | None, weight: Tensor, bias: Tensor, eps: float, ops: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Training-mode ``act(bn(x) [+ z])`` (``ops``: 0 bn, 1 bn+relu, 2 bn+add+relu).

    Returns (y, batch mean, batch inverse std, cuDNN's reserve space for the backward).
    """
    if _cudnn(x):
        return api.forward_training(x, z, weight, bias, eps, ops)
    y, mean, invstd = torch.ops.aten.native_batch_norm.default(x, weight, bias, None, None, True, 0.0, eps)
    if ops == api.OPS_BN_ADD_RELU:
        assert z is not None
        y = y + z
    if ops != api.OPS_BN:
        y = torch.relu(y)
    return y.contiguous(memory_format=_layout(x)), mean, invstd, x.new_empty((0,), dtype=torch.uint8)


@fused_batch_norm.register_fake
def _fused_batch_norm_fake(
    x: Tensor, z: Tensor | None, weight: Tensor, bias: Tensor, eps: float, ops: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    channels = x.shape[1]
    if not _cudnn(x):
        reserve: Any = 0
    elif all(isinstance(d, int) for d in x.shape):
        reserve = api.reserve_size(x, ops)
    else:  # symbolic shapes (opcheck's dynamic-shape test): the size is cuDNN's to say at run time
        reserve = torch.library.get_ctx().new_dynamic_size()
    return (
        torch.empty_like(x, memory_format=_layout(x)),
        x.new_empty((channels,), dtype=torch.float32),
        x.new_empty((channels,), dtype=torch.float32),
        x.new_empty((reserve,), dtype=torch.uint8),
    )


@torch.library.custom_op(BACKWARD_OP, mutates_args=())
def fused_batch_norm_backward(
    grad_y: Tensor,
    x: Tensor,
    y: Tensor,
    weight: Tensor,
    bias: Tensor,
    mean: Tensor,
    invstd: Tensor,
    reserve: Tensor,
    eps: float,
    ops: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients for x, z (empty unless ``ops`` adds), weight and bias."""
    if _cudnn(x):
        grad_x, grad_z, grad_weight, grad_bias = api.backward(
            grad_y.contiguous(memory_format=torch.channels_last), x, y, weight, bias, mean, invstd, reserve, eps, ops
        )
        return grad_x, grad_z if grad_z is not None else x.new_empty((0,)), grad_weight, grad_bias
    grad = grad_y if ops == api.OPS_BN else torch.ops.aten.threshold_backward.default(grad_y, y, 0)
    grad_x, grad_weight, grad_bias = torch.ops.aten.native_batch_norm_backward.default(
        grad, x, weight, None, None, mean, invstd, True, eps, [True, True, True]
    )
    grad_z = grad.contiguous(memory_format=_layout(x)) if ops == api.OPS_BN_ADD_RELU else x.new_empty((0,))
    return grad_x.contiguous(memory_format=_layout(x)), grad_z, grad_weight, grad_bias


@fused_batch_norm_backward.register_fake
def _fused_batch_norm_backward_fake(
    grad_y: Tensor,
    x: Tensor,
    y: Tensor,
    weight: Tensor,
    bias: Tensor,
    mean: Tensor,
    invstd: Tensor,
    reserve: Tensor,
    eps: float,
    ops: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    layout = _layout(x)
    grad_x = torch.empty_like(x, memory_format=layout)
    grad_z = torch.empty_like(x, memory_format=layout) if ops == api.OPS_BN_ADD_RELU else x.new_empty((0,))
    return grad_x, grad_z, torch.empty_like(weight), torch.empty_like(bias)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
    x, _z, weight, bias, eps, ops = inputs
    y, mean, invstd, reserve = output
    ctx.save_for_backward(x, y, weight, bias, mean, invstd, reserve)
    ctx.eps, ctx.ops = eps, ops


def _backward(ctx: Any, grad_y: Tensor, *_other_grads: Any) -> tuple[Tensor | None, ...]:
    x, y, weight, bias, mean, invstd, reserve = ctx.saved_tensors
    if _cudnn(x):
        # Traced here, not only inside the operator, so inductor writes the gradient in the layout cuDNN reads.
        grad_y = grad_y.contiguous(memory_format=torch.channels_last)
    grad_x, grad_z, grad_weight, grad_bias = fused_batch_norm_backward(
        grad_y, x, y, weight, bias, mean, invstd, reserve, ctx.eps, ctx.ops
    )
    return (
        grad_x,
        grad_z if ctx.ops == api.OPS_BN_ADD_RELU else None,
        grad_weight,
        grad_bias,
        None,
        None,
    )


fused_batch_norm.register_autograd(_backward, setup_context=_setup_context)


class FusedBatchNorm2d(AdoptedBatchNorm2d):
    """``BatchNorm2d`` whose forward also adds a residual and applies a ReLU, as one cuDNN call where it can.

    Built from an existing module, it holds that module's own parameters and buffers (the optimizer, the
    state dict and every probe see the same tensors). ``forward(x, z=None)`` computes ``act(bn(x) [+ z])``:
    through the operator when the call is one cuDNN's fused kernels take, through ``nn.BatchNorm2d`` and
    PyTorch's add and ReLU otherwise (evaluation mode, a contiguous-format input, a dtype cuDNN refused).
    """

    def __init__(self, source: nn.BatchNorm2d, ops: int) -> None:
        super().__init__(source)
        self.ops = ops

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, fused={OPS_NAMES[self.ops]}"

    def _fusable(self, x: Tensor, z: Tensor | None) -> bool:
        return bool(
            self.trains_on(x)
            and self.weight.dtype == torch.float32
            and (not _cudnn(x) or (x.dtype in api.DATA_TYPES and x.is_contiguous(memory_format=torch.channels_last)))
            and (z is None or (z.shape == x.shape and z.dtype == x.dtype and z.stride() == x.stride()))
        )

    def forward(self, x: Tensor, z: Tensor | None = None) -> Tensor:
        if not self._fusable(x, z):
            y = super().forward(x)
            if z is not None:
                y = y + z
            return F.relu(y) if self.ops != api.OPS_BN else y
        assert self.running_mean is not None and self.running_var is not None and self.momentum is not None
        assert self.num_batches_tracked is not None
        y, mean, invstd, _reserve = fused_batch_norm(x, z, self.weight, self.bias, self.eps, self.ops)
        with torch.no_grad():
            # nn.BatchNorm's update: the unbiased batch variance, from invstd = 1 / sqrt(var + eps).
            count = x.numel() // x.shape[1]
            variance = (invstd.pow(-2) - self.eps) * (count / (count - 1))
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(variance, self.momentum)
            self.num_batches_tracked.add_(1)
        return y


_ADDS: tuple[Callable[..., Any], ...] = (operator.add, operator.iadd, torch.add)
_INPLACE = (operator.iadd, "add_")


def _residual(add: fx.Node, bn: fx.Node) -> fx.Node | None:
    """The other operand when ``add`` is ``bn + other`` (either order; an in-place add must write into ``bn``)."""
    is_add = (add.op == "call_function" and add.target in _ADDS) or (
        add.op == "call_method" and add.target in ("add", "add_")
    )
    if not is_add or add.kwargs or len(add.args) != 2:
        return None
    first, second = add.args
    inplace = add.target in _INPLACE
    if first is bn and isinstance(second, fx.Node) and second is not bn:
        return second
    if second is bn and isinstance(first, fx.Node) and first is not bn and not inplace:
        return first
    return None


def fuse_model(model: nn.Module) -> tuple[fx.GraphModule, dict[str, str]]:
    """``model`` traced, each ``BatchNorm2d`` replaced by a :class:`FusedBatchNorm2d` that took in what follows.

    Returns the rewritten module (same parameter and buffer names and objects) and, per batch norm, the
    operations its call now covers. Raises whatever ``torch.fx`` raises on a model it cannot trace.
    """
    traced = trace(model)
    modules = dict(traced.named_modules())
    calls = Counter(str(node.target) for node in traced.graph.nodes if node.op == "call_module")
    fused: dict[str, str] = {}
    for node in list(traced.graph.nodes):
        if node.op != "call_module" or type(modules[str(node.target)]) is not nn.BatchNorm2d:
            continue
        name = str(node.target)
        ops, residual, tail = api.OPS_BN, None, node
        # A module called more than once has one ``ops`` for all its calls: only plain batch norm fits each.
        user = only_user(node) if calls[name] == 1 else None
        if user is not None and is_relu(user, modules):
            ops, tail = api.OPS_BN_RELU, user
        elif user is not None and (residual := _residual(user, node)) is not None:
            relu = only_user(user)
            if relu is not None and is_relu(relu, modules):
                ops, tail = api.OPS_BN_ADD_RELU, relu
            else:
                residual = None
        if name not in fused:
            source = modules[name]
            assert isinstance(source, nn.BatchNorm2d)
            traced.set_submodule(name, FusedBatchNorm2d(source, ops))
            fused[name] = OPS_NAMES[ops]
        if tail is node:
            continue
        with traced.graph.inserting_after(tail):
            call = traced.graph.call_module(name, (node.args[0],) if residual is None else (node.args[0], residual))
        tail.replace_all_uses_with(call)
        traced.graph.erase_node(tail)
        if ops == api.OPS_BN_ADD_RELU:
            assert user is not None
            traced.graph.erase_node(user)
        traced.graph.erase_node(node)
    traced.graph.lint()
    traced.delete_all_unused_submodules()
    traced.recompile()
    return traced, fused


def refusal(device: torch.device, dtype: torch.dtype) -> str | None:
    """cuDNN's own words when its fused batch norm + add + ReLU will not take ``dtype`` input (None when it will)."""
    if device.type != "cuda":
        return None
    if dtype not in api.DATA_TYPES:
        return f"no cuDNN data type for {dtype}"
    x = torch.randn((2, 8, 4, 4), device=device).to(dtype).contiguous(memory_format=torch.channels_last)
    ones, zeros = torch.ones(8, device=device), torch.zeros(8, device=device)
    try:
        api.forward_training(x, x, ones, zeros, 1e-5, api.OPS_BN_ADD_RELU)
    except api.CudnnError as exc:
        return str(exc)
    return None


def apply(step: TrainStep) -> TrainStep:
    """cudnn-batch-norm with ``fuse = true``: the model rewritten by :func:`fuse_model`, and the notes."""
    if step.model is None:
        raise SkipCell("cudnn-batch-norm needs a workload with a model")
    if not any(type(m) is nn.BatchNorm2d for m in step.model.modules()):
        raise SkipCell("cudnn-batch-norm (fuse) found no BatchNorm2d module in this workload's model")
    if step.device.type == "cuda" and step.memory_format != torch.channels_last:
        # Every call would fall back to PyTorch's batch norm: the cell would measure the model without the option.
        raise SkipCell("cudnn-batch-norm (fuse): cuDNN's fused kernels take channels-last input; add channels-last")
    dtype = step.autocast_dtype or torch.float32
    reason = refusal(step.device, dtype)
    if reason is not None:
        raise SkipCell(f"cudnn-batch-norm (fuse): cuDNN refuses {dtype} input on this build: {reason}")
    try:
        model, fused = fuse_model(step.model)
    except Exception as exc:  # torch.fx raises many kinds on a model it cannot trace; each is this skip
        raise SkipCell(
            f"cudnn-batch-norm (fuse): torch.fx cannot trace this model: {type(exc).__name__}: {exc}"
        ) from exc
    step.model = model
    step.notes["cudnn_batch_norm"] = {
        "modules": len(fused),
        "fused": dict(Counter(fused.values())),
        "kernel": "cudnn-ex" if step.device.type == "cuda" else "native",
        "input_dtype": str(dtype).removeprefix("torch."),
    }
    return step
