"""One call from a suite to its results: what ``ampsuite run``, the pytest plugin and asv share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ampsuite.contract.cell import Cell
from ampsuite.contract.errors import UsageError
from ampsuite.host import environment, executors
from ampsuite.host.manager import PluginSettings, Registry, load_registry
from ampsuite.spec import limits, matrix, suitefile
from ampsuite.spec.keyword import select
from ampsuite.spec.suitespec import SuiteSpec

__all__ = ["Plan", "plan"]


@dataclass
class Plan:
    """A suite resolved for a device: the spec, the registry and the selected cells."""

    spec: SuiteSpec
    device: str
    registry: Registry
    cells: list[Cell]
    settings: PluginSettings = field(default_factory=PluginSettings)


def resolve_device(spec_device: str, override: str | None) -> str:
    detected = environment.detect_device()
    device = override or (detected if spec_device == "auto" else spec_device)
    if device == "cuda" and detected != "cuda":
        raise UsageError("the suite asks for a CUDA device, and torch sees none (use --device cpu)")
    return device


def plan(
    suite: str | Path | SuiteSpec | None = None,
    *,
    device: str | None = None,
    keyword: str | None = None,
    settings: PluginSettings | None = None,
    objects: Sequence[tuple[str, object]] = (),
    allow_large: bool = False,
) -> Plan:
    """Load the suite (the default one for the device when None), the plugins, and expand the matrix.

    Everything is validated here, before any cell runs; a matrix over ``limits.MAX_CELLS``
    cells is refused unless ``allow_large``.
    """
    settings = settings or PluginSettings.from_args([])  # $AMPSUITE_PLUGINS applies as on the command line
    if suite is None:
        device = device or environment.detect_device()
        spec = suitefile.load(suitefile.default_suite_path(device))
    else:
        spec = suite if isinstance(suite, SuiteSpec) else suitefile.load(suite)
    dev = resolve_device(spec.device, device)
    registry = load_registry(settings, objects)
    executors.resolve(spec, registry.executors)  # a bad [executor] table is refused before anything runs
    gpus = environment.gpu_count() if dev == "cuda" else 0
    max_cells = None if allow_large else limits.MAX_CELLS
    cells = select(matrix.expand(spec, registry, dev, gpus, max_cells=max_cells), keyword)
    registry.hook.ampsuite_modify_cells(suite=spec.as_dict(), cells=cells)
    return Plan(spec, dev, registry, cells, settings)
