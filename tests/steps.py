"""Built train steps in the technique and workload tests: a technique applied as the worker applies it, and the
losses of a few training steps."""

from __future__ import annotations

import functools
from typing import Any

from ampsuite import Technique, TrainStep
from ampsuite.spec.options import build_options


@functools.cache
def builtin_techniques() -> dict[str, Technique]:
    """The built-in techniques by name, loaded as a run loads them (installed plugins left out)."""
    from ampsuite.host.manager import PluginSettings, load_registry

    return dict(load_registry(PluginSettings(autoload=False)).techniques)


def use(step: TrainStep, name: str, **options: Any) -> TrainStep:
    """``step`` with the built-in technique ``name`` applied as the worker applies it: its options built from plain
    suite-file values."""
    technique = builtin_techniques()[name]
    return technique.apply(step, build_options(technique.options, options))


def losses(step: TrainStep, n: int) -> list[float]:
    """The losses of ``n`` training steps of ``step``, composed as the worker composes it."""
    run = step.compose()
    return [float(run(step.data())) for _ in range(n)]
