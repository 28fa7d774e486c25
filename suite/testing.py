"""ampsuite's pytest plugin: test a plugin by running a small suite on CPU with it loaded.

pytest loads this module through ampsuite's ``pytest11`` entry point, so a
plugin package's tests can use the fixtures below as soon as ampsuite is
installed (``-p ampsuite.testing`` loads it where the entry point is missing):

``ampsuite_plugin``
    ``register(obj, name=None)`` registers a plugin *object* for the current
    test only; it is dropped at teardown.
``ampsuite_run``
    ``run(suite, plugins=..., ...)`` runs a suite (TOML text, a dict, or a
    path) on CPU with the registered objects and the named plugin modules and
    returns a :class:`SuiteResult`: records by cell id, statuses, metrics and
    assertion helpers.
``ampsuite_registry``
    ``registry(plugins=...)`` loads the plugins as a run would and returns
    the registry (workloads, techniques, probes by name).
``tiny_measure``
    the ``[measure]`` table used when a suite has none: a handful of steps,
    so that a test checks behaviour in well under a second per cell.

Runs are in-process by default: registered objects exist only in the test's
process and cannot travel to a worker. ``isolated=True`` runs every cell in
its own worker process exactly as ``ampsuite run`` does; only plugin modules
(importable by name) can take part then. Installed plugins are *not*
auto-loaded (``autoload=False``), so a test sees exactly the built-ins plus
what it names; environment variables such as ``AMPSUITE_PLUGINS`` are ignored
for the same reason.

This module is imported by every pytest session in an environment where
ampsuite is installed, so it imports nothing heavy (torch, the runner) until
a fixture is used.
"""

from __future__ import annotations

import os
import tomllib
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ampsuite.contract.errors import PluginError, SuiteFileError, UsageError
from ampsuite.spec.tomltext import toml_lines
from ampsuite.testresult import SuiteResult

if TYPE_CHECKING:
    from ampsuite.contract.cell import Cell
    from ampsuite.host.manager import PluginSettings, Registry
    from ampsuite.spec.suitespec import SuiteSpec

__all__ = [
    "TINY_MEASURE",
    "PluginError",
    "PluginRegistrar",
    "SuiteFileError",
    "SuiteResult",
    "load_plugins",
    "run_suite",
    "suite_text",
]

TINY_MEASURE: dict[str, Any] = {
    "warmup_steps": 1,
    "warmup_seconds": 0.0,
    "min_steps": 3,
    "max_steps": 3,
    "max_seconds": 1.0,
    "noise_target": 1.0,
    "numerics_steps": 2,
    "processes": 1,
}
"""Three timed steps after one warm-up, in one process: figures mean nothing, behaviour is all exercised."""

SuiteInput = str | os.PathLike[str] | Mapping[str, Any]
PluginRef = str | types.ModuleType


# ---------------------------------------------------------------------------
# suites given as text, dicts or paths
# ---------------------------------------------------------------------------


def suite_text(suite: SuiteInput, measure: Mapping[str, Any] | None = TINY_MEASURE) -> tuple[str, str]:
    """(TOML text, name for messages) of a suite given as a dict, TOML text or a file path.

    A ``str`` with a newline is TOML text; any other ``str`` or path-like is a
    file. ``measure`` becomes the ``[measure]`` table when the suite has none
    (None: leave the suite as it is).
    """
    if isinstance(suite, Mapping):
        data = dict(suite)
        if measure is not None and "measure" not in data:
            data["measure"] = dict(measure)
        return "\n".join(toml_lines(data)).lstrip() + "\n", "<suite>"
    if isinstance(suite, str) and "\n" in suite:
        text, where = suite, "<suite>"
    else:
        where = os.fspath(suite)
        text = Path(where).read_text(encoding="utf-8")
    try:
        has_measure = "measure" in tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        has_measure = True  # leave broken text alone: the suite loader reports it with the key path
    if measure is not None and not has_measure:
        text = text.rstrip("\n") + "\n\n" + "\n".join(toml_lines({"measure": dict(measure)})).lstrip() + "\n"
    return text, where


# ---------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------


@dataclass
class _QuietObserver:
    """Collects what the runner would print instead of drawing progress."""

    messages: list[str] = field(default_factory=list)

    def run_started(self, total: int, path: Path) -> None:
        pass

    def cell_started(self, index: int, cell: Cell) -> None:
        pass

    def cell_finished(self, index: int, record: dict[str, Any]) -> None:
        pass

    def message(self, text: str) -> None:
        self.messages.append(text)


def _module_name(plugin: PluginRef) -> str:
    return plugin.__name__ if isinstance(plugin, types.ModuleType) else str(plugin)


def _settings(plugins: Sequence[PluginRef], blocked: Sequence[str], autoload: bool) -> PluginSettings:
    from ampsuite.host.manager import PluginSettings

    return PluginSettings(tuple(_module_name(p) for p in plugins), tuple(blocked), autoload)


def load_plugins(
    *,
    objects: Sequence[tuple[str, object]] = (),
    plugins: Sequence[PluginRef] = (),
    blocked: Sequence[str] = (),
    autoload: bool = False,
) -> Registry:
    """The registry a run with these plugins would use (built-ins always included)."""
    from ampsuite.host.manager import load_registry

    return load_registry(_settings(plugins, blocked, autoload), objects)


def run_suite(
    suite: SuiteInput | SuiteSpec,
    workdir: str | os.PathLike[str],
    *,
    objects: Sequence[tuple[str, object]] = (),
    plugins: Sequence[PluginRef] = (),
    blocked: Sequence[str] = (),
    autoload: bool = False,
    isolated: bool = False,
    keyword: str | None = None,
    device: str | None = None,
    measure: Mapping[str, Any] | None = TINY_MEASURE,
    timeout: float | None = None,
) -> SuiteResult:
    """Plan and run a suite; the results file goes to ``workdir/results.json``.

    :param objects: (name, plugin object) pairs, registered in this process only.
    :param plugins: plugin modules (objects or import names), loaded as with ``-p``.
    :param blocked: plugin names blocked as with ``-p no:NAME``.
    :param autoload: also load installed ``ampsuite`` entry points.
    :param isolated: one worker process per cell, as ``ampsuite run`` does.
    :param keyword: a ``-k`` expression selecting cells.
    :param device: ``cpu`` or ``cuda``; by default the device the suite names, and the CPU for ``auto`` (a test
        means the same cells on every machine, a GPU one included).
    :param measure: the ``[measure]`` table for suites without one.
    :raises UsageError: ``isolated`` together with plugin objects.
    :raises SuiteFileError, PluginError: as ``ampsuite run`` would report them.
    """
    from ampsuite.host import environment, session
    from ampsuite.run import runner
    from ampsuite.spec import suitefile
    from ampsuite.spec.suitespec import SuiteSpec

    if isolated and objects:
        names = ", ".join(name for name, _ in objects)
        raise UsageError(
            f"isolated runs load plugins by module name in each worker; the registered objects ({names}) "
            "exist only in this process: run in-process, or pass their modules as plugins=[...]"
        )
    if isinstance(suite, SuiteSpec):
        spec = suite
    else:
        text, where = suite_text(suite, measure)
        spec = suitefile.loads(text, where)
    if device is None:
        device = "cpu" if spec.device == "auto" else spec.device
    if device == "cuda" and environment.detect_device() != "cuda":
        # The CLI's own message names CLI flags; a test is changed through this function's arguments.
        what = 'suite.device = "cuda"' if spec.device == "cuda" else "device='cuda'"
        raise UsageError(
            f"{spec.path}: {what} asks for a CUDA device and torch sees none (pass device='cpu' to run it here, "
            "or skip the test without a GPU: @pytest.mark.skipif(not torch.cuda.is_available(), reason=...))"
        )
    plan = session.plan(
        spec, device=device, keyword=keyword, settings=_settings(plugins, blocked, autoload), objects=objects
    )
    work = Path(workdir)
    config = runner.RunConfig(
        output=work / "results.json",
        in_process=not isolated,
        data_dir=work / "data",
        timeout=timeout,
        measure_peaks=False,
        argv=("ampsuite_run",),
    )
    observer = _QuietObserver()
    doc, interrupted = runner.run_plan(plan, config, observer)
    return SuiteResult(doc, config.output, interrupted, plan.registry, observer.messages)


# ---------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------


class PluginRegistrar:
    """``register(obj, name=None) -> obj``: a plugin object for the current test only."""

    def __init__(self) -> None:
        self._objects: list[tuple[str, object]] = []

    @property
    def objects(self) -> tuple[tuple[str, object], ...]:
        return tuple(self._objects)

    def __call__(self, obj: object, name: str | None = None) -> object:
        name = name or getattr(obj, "__name__", None) or f"{type(obj).__name__}-{len(self._objects)}"
        if any(n == name for n, _ in self._objects):
            raise ValueError(f"a plugin named {name!r} is already registered in this test; pass name=...")
        self._objects.append((name, obj))
        return obj

    def clear(self) -> None:
        self._objects.clear()


@pytest.fixture
def ampsuite_plugin() -> Iterator[PluginRegistrar]:
    """Register plugin objects (a class instance, a namespace) for this test only."""
    registrar = PluginRegistrar()
    yield registrar
    registrar.clear()


@pytest.fixture
def tiny_measure() -> dict[str, Any]:
    """The ``[measure]`` table ``ampsuite_run`` adds to suites without one; override it in a conftest."""
    return dict(TINY_MEASURE)


@pytest.fixture
def ampsuite_run(
    ampsuite_plugin: PluginRegistrar, tiny_measure: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., SuiteResult]:
    """``run(suite, *, plugins=(), isolated=False, keyword=None, ...) -> SuiteResult``.

    Runs on the device the suite names (the CPU for ``auto``), with the objects
    registered through ``ampsuite_plugin``; every call writes into a fresh
    temporary directory. See :func:`run_suite` for every argument.
    """

    def run(suite: SuiteInput | SuiteSpec, **kwargs: Any) -> SuiteResult:
        kwargs.setdefault("objects", ampsuite_plugin.objects)
        kwargs.setdefault("measure", tiny_measure)
        return run_suite(suite, tmp_path_factory.mktemp("ampsuite-run"), **kwargs)

    return run


@pytest.fixture
def ampsuite_registry(ampsuite_plugin: PluginRegistrar) -> Callable[..., Registry]:
    """``registry(*, plugins=(), blocked=(), autoload=False) -> Registry`` with this test's objects."""

    def registry(**kwargs: Any) -> Registry:
        kwargs.setdefault("objects", ampsuite_plugin.objects)
        return load_plugins(**kwargs)

    return registry


def pytest_report_header(config: pytest.Config) -> str:
    from ampsuite import PLUGIN_API, __version__

    return f"ampsuite {__version__} (plugin API {PLUGIN_API})"
