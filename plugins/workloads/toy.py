"""A tiny multi-layer perceptron: the smallest real training step, for CPU tests."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from suite import BuildContext, TrainStep, Workload, hookimpl


@dataclass(frozen=True)
class ToyOptions:
    features: int = field(default=32, metadata={"help": "input features"})
    hidden: int = field(default=64, metadata={"help": "hidden width"})
    layers: int = field(default=2, metadata={"help": "hidden layers"})
    classes: int = field(default=10, metadata={"help": "output classes"})
    lr: float = field(default=0.01, metadata={"help": "SGD learning rate"})

    def __post_init__(self) -> None:
        for name in ("features", "hidden", "layers", "classes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


def _impl() -> ModuleType:
    # The torch-dependent part lives in plugins.workloads._toy: registering this plugin (ampsuite list,
    # --help, suite-file checks) must not import torch.
    return importlib.import_module("plugins.workloads._toy")


def build(options: ToyOptions, ctx: BuildContext) -> TrainStep:
    return _impl().build(options, ctx)


@hookimpl
def ampsuite_workloads() -> list[Workload]:
    return [
        Workload(
            name="toy",
            summary="tiny MLP on random data; exercises the whole pipeline in seconds",
            build=build,
            options=ToyOptions,
            unit="samples",
            traits=frozenset({"model", "data-path"}),
        )
    ]


def __getattr__(name: str) -> Any:
    """Everything else of the plugin (models, datasets) from its implementation module."""
    if name.startswith(("__", "AMPSUITE_", "ampsuite_")):  # the manager's and pluggy's probes stay here
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_impl(), name)
