"""A tiny multi-layer perceptron: the smallest real training step, for CPU tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from ampsuite import Workload, hookimpl, lazy
from ampsuite.plugins.workloads import fields


@dataclass(frozen=True)
class ToyOptions:
    features: int = field(default=32, metadata={"help": "input features", "ge": 1})
    hidden: int = field(default=64, metadata={"help": "hidden width", "ge": 1})
    layers: int = field(default=2, metadata={"help": "hidden layers", "ge": 1})
    classes: int = fields.classes(10)
    lr: float = field(default=0.01, metadata={"help": "SGD learning rate"})


@hookimpl
def ampsuite_workloads() -> list[Workload]:
    return [
        Workload(
            name="toy",
            summary="tiny MLP on random data; exercises the whole pipeline in seconds",
            build=lazy("ampsuite.plugins.workloads._toy:build"),
            options=ToyOptions,
            unit="samples",
            traits=frozenset({"model", "data-path"}),
        )
    ]
