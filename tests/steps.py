"""Train steps in the technique and workload tests: a step on one fixed batch, a technique applied as the worker
applies it, the losses of a few training steps, and the reason expansion skips a built-in cell."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ampsuite import Batch, Technique, TrainStep
from ampsuite.spec.options import build_options
from ampsuite.testing import suite_text

if TYPE_CHECKING:
    from ampsuite.host.manager import Registry


@functools.cache
def _builtins() -> Registry:
    """The built-in plugins, loaded as a run loads them (installed plugins left out)."""
    from ampsuite.host.manager import PluginSettings, load_registry

    return load_registry(PluginSettings(autoload=False))


def builtin_techniques() -> dict[str, Technique]:
    """The built-in techniques by name."""
    return dict(_builtins().techniques)


def skip_reason(workload: str, *techniques: str, device: str = "cpu", **options: Any) -> str | None:
    """Why matrix expansion skips the cell of the built-in ``workload`` (its table's ``options``, batch size 8 unless
    given) and ``techniques`` on ``device``, or None: what ``ampsuite run --dry-run`` shows."""
    from ampsuite.spec.matrix import expand
    from ampsuite.spec.suitefile import loads

    suite = {
        "workloads": {"w": {"plugin": workload, "batch_size": 8, **options}},
        "combinations": {"c": list(techniques)},
    }
    (cell,) = expand(loads(suite_text(suite, None)[0], "skip.toml"), _builtins(), device)
    return cell.skip_reason


def use(step: TrainStep, name: str, **options: Any) -> TrainStep:
    """``step`` with the built-in technique ``name`` applied as the worker applies it: its options built from plain
    suite-file values."""
    technique = builtin_techniques()[name]
    return technique.apply(step, build_options(technique.options, options))


def losses(step: TrainStep, n: int) -> list[float]:
    """The losses of ``n`` training steps of ``step``, composed as the worker composes it."""
    run = step.compose()
    return [float(run(step.data())) for _ in range(n)]


def one_batch_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> TrainStep:
    """A step of ``model`` on the one batch (x, y), every step, on x's kind of device: SGD at a learning rate of 0.1
    on the cross entropy."""
    return TrainStep(
        device=torch.device(x.device.type),
        batch_size=len(x),
        samples_per_step=len(x),
        data=lambda: Batch((x,), y),
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
    )
