"""What the model rewrites of cudnn-batch-norm (``fuse``) and persistent-batch-norm share: how they trace a model,
read its graph, and build the module they put in a batch norm's place.

Both replace ``BatchNorm2d -> ReLU`` with one call of a module of their own, so they trace and match the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn

INT32_MAX = 2**31 - 1
"""The most elements a replacement kernel takes: cuDNN's batch norm and the Triton kernels index with int32."""
RELUS: tuple[Callable[..., Any], ...] = (F.relu, F.relu_, torch.relu, torch.relu_)


def is_relu(node: fx.Node, modules: dict[str, nn.Module]) -> bool:
    """Whether ``node`` applies a ReLU: an ``nn.ReLU`` module, ``F.relu``/``torch.relu`` or ``.relu()``."""
    if node.op == "call_module":
        return type(modules[str(node.target)]) is nn.ReLU
    if node.op == "call_function":
        return node.target in RELUS
    return node.op == "call_method" and node.target in ("relu", "relu_")


def only_user(node: fx.Node) -> fx.Node | None:
    """The one node that reads ``node``'s value, or None when there are none or several."""
    users = list(node.users)
    return users[0] if len(users) == 1 else None


class _BatchNormTracer(fx.Tracer):
    """Traces only into the modules that hold a ``BatchNorm2d``: every other one stays one call, as it is."""

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return super().is_leaf_module(m, module_qualified_name) or not any(
            isinstance(sub, nn.BatchNorm2d) for sub in m.modules()
        )


def trace(model: nn.Module) -> fx.GraphModule:
    """``model`` as a graph of calls, opened down to its ``BatchNorm2d`` modules and no further.

    Other techniques' modules need not be traceable, and nothing inside a module without a batch norm is a pair to
    rewrite: maxpool-offsets' pool iterates over its window, which ``fx.symbolic_trace`` refuses, so tracing the
    whole model would make every cell with both techniques a skip. Raises whatever ``torch.fx`` raises on a module
    it must open and cannot trace.
    """
    return fx.GraphModule(model, _BatchNormTracer().trace(model), model.__class__.__name__)


class AdoptedBatchNorm2d(nn.BatchNorm2d):
    """A ``BatchNorm2d`` over an existing one's own parameters and buffers, in its training mode.

    The optimizer, the state dict and every probe see the same tensors under the same names.
    """

    def __init__(self, source: nn.BatchNorm2d) -> None:
        super().__init__(
            source.num_features, source.eps, source.momentum, source.affine, source.track_running_stats, device="meta"
        )
        self.weight, self.bias = source.weight, source.bias
        self.running_mean, self.running_var = source.running_mean, source.running_var
        self.num_batches_tracked = source.num_batches_tracked
        self.train(source.training)

    def trains_on(self, x: torch.Tensor) -> bool:
        """Whether this call is one a replacement kernel can take as far as the module goes: training, with affine
        parameters and momentum-updated running statistics, on a 4-D input that int32 offsets index and that has
        more than one value a channel (else ``nn.BatchNorm2d``'s own error)."""
        return bool(
            self.training
            and self.affine
            and self.track_running_stats
            and self.momentum is not None
            and x.dim() == 4
            and x.numel() <= INT32_MAX
            and x.numel() > x.shape[1]
        )
