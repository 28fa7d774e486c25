"""How the model rewrites of cudnn-batch-norm (``fuse``) and persistent-batch-norm trace a model and read its graph.

Both replace ``BatchNorm2d -> ReLU`` with one call of a module of their own, so they trace and match the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn

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
    rewrite: maxpool-offsets' pool iterates over its window, which ``fx.symbolic_trace`` refuses (session 21's
    first ResNet-50 cell with persistent-batch-norm and maxpool-offsets was a skip for it). Raises whatever
    ``torch.fx`` raises on a module it must open and cannot trace.
    """
    return fx.GraphModule(model, _BatchNormTracer().trace(model), model.__class__.__name__)
