"""One call from a suite to its results: what ``ampsuite run``, the pytest plugin and asv share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ampsuite.contract.cell import Cell
from ampsuite.contract.errors import PluginError, UsageError
from ampsuite.host import environment, executors
from ampsuite.host.manager import PluginSettings, Registry, load_registry
from ampsuite.spec import limits, matrix, suitefile
from ampsuite.spec.keyword import select
from ampsuite.spec.suitespec import SuiteSpec

__all__ = ["Plan", "parse_device", "plan"]


@dataclass
class Plan:
    """A suite resolved for a device: the spec, the registry and the selected cells."""

    spec: SuiteSpec
    device: str
    registry: Registry
    cells: list[Cell]
    settings: PluginSettings = field(default_factory=PluginSettings)
    preview: tuple[str, int] | None = None
    """The device and GPU count the cells were expanded for instead of this machine's (``--as-device``)."""


_NO_CUDA_HINT = "--device cpu runs it here; --dry-run --as-device cuda:N previews its cells as on N GPUs"


def _flag_decides(spec_device: str, override: str | None) -> bool:
    """Whether ``--device`` chose the device rather than ``suite.device`` (the pytest plugin passes the suite's own
    device as the override, which repeats the suite)."""
    return override not in (None, spec_device)


def resolve_device(spec_device: str, override: str | None) -> str:
    """The device a run is on: ``override`` (``--device``), else the suite's.

    :raises UsageError: CUDA asked for where torch sees none, naming the flag, or ``suite.device`` where the
        override only repeats it (the pytest plugin passes the suite's own device); :func:`plan` adds the file.
    """
    detected = environment.detect_device()
    device = override or (detected if spec_device == "auto" else spec_device)
    if device == "cuda" and detected != "cuda":
        if _flag_decides(spec_device, override):
            raise UsageError(f"--device cuda: torch sees no CUDA device ({_NO_CUDA_HINT})")
        raise UsageError(
            f'suite.device = "cuda": the suite asks for a CUDA device, and torch sees none ({_NO_CUDA_HINT})'
        )
    return device


def parse_device(text: str) -> tuple[str, int]:
    """``--as-device``: ``cpu``, ``cuda`` (one GPU) or ``cuda:N`` (N GPUs) as (device, GPU count).

    :raises UsageError: anything else.
    """
    kind, _, count = text.strip().partition(":")
    if kind == "cpu" and not count:
        return "cpu", 0
    if kind == "cuda" and (not count or count.isdigit()):
        gpus = int(count or 1)
        if 1 <= gpus <= limits.MAX_GPUS:
            return "cuda", gpus
    raise UsageError(f"--as-device: expected cpu, cuda or cuda:N (N from 1 to {limits.MAX_GPUS:,}), got {text!r}")


def plan(
    suite: str | Path | SuiteSpec | None = None,
    *,
    device: str | None = None,
    keyword: str | None = None,
    settings: PluginSettings | None = None,
    objects: Sequence[tuple[str, object]] = (),
    allow_large: bool = False,
    preview: tuple[str, int] | None = None,
) -> Plan:
    """Load the suite (the default one for the device when None), the plugins, and expand the matrix.

    Everything is validated here, before any cell runs; a matrix over ``limits.MAX_CELLS``
    cells is refused unless ``allow_large``. ``preview`` (device, GPU count) expands the cells as on
    such a machine, without asking this one (``ampsuite run --dry-run --as-device``); such a plan is
    for looking at, never for running.
    """
    settings = settings or PluginSettings.from_args([])  # $AMPSUITE_PLUGINS applies as on the command line
    if preview is not None:
        device = preview[0]
    if suite is None:
        device = device or environment.detect_device()
        spec = suitefile.load(suitefile.default_suite_path(device))
    else:
        spec = suite if isinstance(suite, SuiteSpec) else suitefile.load(suite)
    if preview is not None:
        dev, gpus = preview
    else:
        try:
            dev = resolve_device(spec.device, device)
        except UsageError as exc:
            if _flag_decides(spec.device, device):  # the message names the flag, not the file
                raise
            raise UsageError(f"{spec.path}: {exc}") from None
        gpus = environment.gpu_count() if dev == "cuda" else 0
    registry = load_registry(settings, objects)
    executors.resolve(spec, registry.executors)  # a bad [executor] table is refused before anything runs
    max_cells = None if allow_large else limits.MAX_CELLS
    try:
        cells = matrix.expand(spec, registry, dev, gpus, max_cells=max_cells, preview=preview is not None)
    except matrix.CheckRaised as exc:
        owner = registry.plugin_of(exc.kind, exc.name).name
        raise PluginError(
            owner,
            f"{exc} in a preview of {dev} (--as-device); a check decides from its arguments (CheckContext.preview "
            "is True here) and leaves what only the device can say to apply (raise SkipCell there)",
        ) from exc
    cells = select(cells, keyword)
    registry.hook.ampsuite_modify_cells(suite=spec.as_dict(), cells=cells)
    return Plan(spec, dev, registry, cells, settings, preview)
