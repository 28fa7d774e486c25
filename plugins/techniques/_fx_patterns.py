"""What the model rewrites of cudnn-batch-norm (``fuse``) and persistent-batch-norm look for in a ``torch.fx`` graph.

Both replace ``BatchNorm2d -> ReLU`` with one call of a module of their own, so they read the graph the same way.
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
