"""The torch-dependent part of :mod:`ampsuite_resnet_kernels.persistent_batch_norm` (imported when a cell applies it).

The model is traced with ``torch.fx``; each ``BatchNorm2d`` whose only reader is a ReLU becomes one call of a
:class:`PersistentBatchNormReLU` over the same parameters and buffers. Its forward takes the kernels of
:mod:`._persistent_bn_kernels` where they apply and ``relu(batch_norm(x))`` through PyTorch everywhere else, so
the rewritten model computes what the original did in every mode.
"""

from __future__ import annotations

import importlib.util
import os
from collections import Counter
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from ampsuite import SkipCell, TrainStep
from torch import Tensor, fx, nn

from ampsuite_resnet_kernels._fx_patterns import AdoptedBatchNorm2d, is_relu, only_user, trace

if TYPE_CHECKING:
    from ampsuite_resnet_kernels.persistent_batch_norm import PersistentBatchNormOptions

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _triton_runs(x: Tensor) -> bool:
    """Whether the kernels can take ``x``: on a GPU, or on the CPU under Triton's interpreter (the tests)."""
    return x.device.type == "cuda" or (x.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1")


class PersistentBatchNormReLU(AdoptedBatchNorm2d):
    """``relu(batch_norm(x))`` over an existing ``BatchNorm2d``'s own parameters and buffers.

    The optimizer, the state dict and every probe see the same tensors. In training, a 4-D channels-last input
    of at least ``min_bytes`` goes through the persistent kernels; anything else (evaluation, a smaller or
    contiguous-format input, a module without running statistics) through ``nn.BatchNorm2d`` and ``F.relu``.
    """

    def __init__(self, source: nn.BatchNorm2d, min_bytes: int, num_warps: int = 4) -> None:
        super().__init__(source)
        self.min_bytes = min_bytes
        self.num_warps = num_warps

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, relu, persistent from {self.min_bytes / 1e6:g} MB, {self.num_warps} warps"

    def takes(self, x: Tensor) -> bool:
        """Whether this call runs the persistent kernels."""
        return bool(
            self.trains_on(x)
            and x.dtype in KERNEL_DTYPES
            and x.numel() * x.element_size() >= self.min_bytes
            and x.is_contiguous(memory_format=torch.channels_last)
            and _triton_runs(x)
        )

    def forward(self, x: Tensor) -> Tensor:
        if not self.takes(x):
            return F.relu(super().forward(x))
        assert self.running_mean is not None and self.running_var is not None and self.momentum is not None
        assert self.num_batches_tracked is not None
        y = _outside_graphs(
            x, self.weight, self.bias, self.running_mean, self.running_var, self.momentum, self.eps, self.num_warps
        )
        with torch.no_grad():
            self.num_batches_tracked.add_(1)
        return y


@torch.compiler.disable
def _outside_graphs(
    x: Tensor,
    weight: Tensor,
    bias: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    momentum: float,
    eps: float,
    num_warps: int,
) -> Tensor:
    """The kernels launched by Triton itself, never inside a torch.compile graph: a graph break a call, on purpose.

    The grid barrier holds only if every program of the grid is resident at once, and ``resident`` counts that from
    the kernel as Triton compiles it. Inside a graph, inductor compiles and launches its own copy of the kernel, whose
    registers nothing here sees: one program too many an SM and the barrier waits forever. The GPU's evidence, on
    H200s (torch 2.11.0+cu130, 2026-12-02, ``ampsuite run tests/gpu/resnet50-bn.toml``): with a break at each call,
    ResNet-50's step with the stem through the kernels ran 7,772.6 img/s; with the calls inside inductor's graph,
    that cell gave no step within 422 s (312 s to the first step with the breaks) and the one with all 33 pairs none
    within 530 s twice. Eager, the same
    kernels run every ResNet-50 shape in a millisecond or less. A break a call is cheap for the stem alone (the
    default ``min_mb``), not for all 33 pairs (43 graphs), which the shape-by-shape timing shows cannot gain anyway.
    """
    from ampsuite_resnet_kernels import _persistent_bn_kernels as kernels

    return kernels.bn_relu(x, weight, bias, running_mean, running_var, momentum, eps, num_warps)


def replace(model: nn.Module, min_bytes: int, num_warps: int = 4) -> tuple[fx.GraphModule, list[str]]:
    """``model`` traced, each ``BatchNorm2d -> ReLU`` one :class:`PersistentBatchNormReLU` call; and their names.

    A batch norm module called more than once, or whose output anything but one ReLU reads, is left as it is.
    Raises whatever ``torch.fx`` raises on a model it cannot trace.
    """
    traced = trace(model)
    modules = dict(traced.named_modules())
    calls = Counter(str(node.target) for node in traced.graph.nodes if node.op == "call_module")
    replaced: list[str] = []
    for node in list(traced.graph.nodes):
        if node.op != "call_module" or type(modules[str(node.target)]) is not nn.BatchNorm2d:
            continue
        name = str(node.target)
        relu = only_user(node)
        if calls[name] != 1 or relu is None or not is_relu(relu, modules):
            continue
        source = modules[name]
        assert isinstance(source, nn.BatchNorm2d)
        traced.set_submodule(name, PersistentBatchNormReLU(source, min_bytes, num_warps))
        with traced.graph.inserting_after(relu):
            call = traced.graph.call_module(name, node.args, node.kwargs)
        relu.replace_all_uses_with(call)
        traced.graph.erase_node(relu)
        traced.graph.erase_node(node)
        replaced.append(name)
    traced.graph.lint()
    traced.delete_all_unused_submodules()
    traced.recompile()
    return traced, replaced


def apply(step: TrainStep, options: PersistentBatchNormOptions) -> TrainStep:
    if step.model is None:
        raise SkipCell("persistent-batch-norm needs a workload with a model (this step has its own phases)")
    if step.device.type == "cuda" and step.memory_format != torch.channels_last:
        # Every call would fall back to PyTorch's batch norm: the cell would measure the model without the kernels.
        # Suites never get here (the technique requires channels-last, pruned at expansion); a direct caller can.
        raise SkipCell("persistent-batch-norm: the kernels take channels-last activations; add channels-last")
    if importlib.util.find_spec("triton") is None:
        raise SkipCell("persistent-batch-norm needs Triton, which this torch installation lacks")
    try:
        model, replaced = replace(step.model, int(options.min_mb * 1e6), options.num_warps)
    except Exception as exc:  # torch.fx raises many kinds on a model it cannot trace; each is this skip
        raise SkipCell(f"persistent-batch-norm: torch.fx cannot trace this model: {type(exc).__name__}: {exc}") from exc
    if not replaced:
        raise SkipCell("persistent-batch-norm found no BatchNorm2d followed by a ReLU in this workload's model")
    step.model = model
    step.notes["persistent_batch_norm"] = {
        "modules": len(replaced),
        "min_mb": options.min_mb,
        "num_warps": options.num_warps,
    }
    return step
