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

import difflib
import fnmatch
import os
import re
import tomllib
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ampsuite.contract.errors import PluginError, SuiteFileError, UsageError
from ampsuite.contract.wire import Status
from ampsuite.spec.tomltext import toml_lines

if TYPE_CHECKING:
    from ampsuite.contract.cell import Cell
    from ampsuite.host.manager import PluginSettings, Registry
    from ampsuite.spec.suitefile import SuiteSpec

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


@dataclass
class SuiteResult:
    """What one suite run left: the results document and ways to read and assert on it.

    Attributes:
        doc: the results document, exactly as written to ``path``.
        path: the results file.
        interrupted: whether the run was interrupted.
        registry: the plugins and records the run used.
        messages: warnings the run printed (e.g. a failing ``ampsuite_cell_finished``).
    """

    doc: dict[str, Any]
    path: Path
    interrupted: bool
    registry: Registry
    messages: list[str] = field(default_factory=list)

    @property
    def records(self) -> dict[str, dict[str, Any]]:
        """The cell records by cell id, in matrix order."""
        return {r["id"]: r for r in self.doc["cells"]}

    @property
    def ids(self) -> list[str]:
        return [r["id"] for r in self.doc["cells"]]

    def record(self, cell_id: str) -> dict[str, Any]:
        """One cell's record; a KeyError that lists the ids when there is no such cell."""
        records = self.records
        if cell_id not in records:
            close = difflib.get_close_matches(cell_id, list(records), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise KeyError(f"no cell {cell_id!r}; {hint}cells are: {', '.join(records) or '(none)'}")
        return records[cell_id]

    def select(self, pattern: str) -> list[dict[str, Any]]:
        """Records whose id matches a glob pattern (``"lstm/*"``, ``"*/bs8"``)."""
        return [r for r in self.doc["cells"] if fnmatch.fnmatchcase(r["id"], pattern)]

    def status(self, cell_id: str) -> str:
        return str(self.record(cell_id)["status"])

    def statuses(self) -> dict[str, str]:
        return {r["id"]: r["status"] for r in self.doc["cells"]}

    def metrics(self, cell_id: str) -> dict[str, Any]:
        return dict(self.record(cell_id)["metrics"])

    def notes(self, cell_id: str) -> dict[str, Any]:
        """What the cell's techniques wrote into ``step.notes``."""
        return dict(self.record(cell_id)["notes"])

    def numerics(self, cell_id: str) -> dict[str, Any]:
        return dict(self.record(cell_id)["numerics"] or {})

    def evidence(self, cell_id: str) -> dict[str, Any]:
        """Why a cell did not pass: a skip reason, an error with traceback, a crash's stderr."""
        return dict(self.record(cell_id)["evidence"] or {})

    def describe(self, record: Mapping[str, Any]) -> str:
        """One cell as one line: id, status and the gist of its evidence."""
        evidence = record.get("evidence") or {}
        if "reason" in evidence:
            gist = evidence["reason"]
        elif "type" in evidence:
            gist = f"{evidence['type']}: {evidence.get('message', '')} (in {evidence.get('phase', '?')})"
        elif evidence:
            gist = ", ".join(f"{k}={v!r}" for k, v in evidence.items() if k != "stderr_tail")
        else:
            gist = ""
        return f"{record['id']}: {record['status']}" + (f" ({gist})" if gist else "")

    def _fail(self, headline: str, records: Sequence[Mapping[str, Any]]) -> None:
        lines = [headline, *("  " + self.describe(r) for r in records)]
        for r in records:
            evidence = r.get("evidence") or {}
            detail = evidence.get("traceback") or evidence.get("stderr_tail")
            if detail:
                lines.append(f"--- {r['id']} ---\n{detail}")
        raise AssertionError("\n".join(lines))

    def assert_all_passed(self, *, allow_skipped: bool = False) -> None:
        """Every cell passed (or was skipped, with ``allow_skipped``); at least one cell ran."""
        if not self.doc["cells"]:
            raise AssertionError("the suite expanded to no cells")
        ok = {Status.PASSED, Status.SKIPPED} if allow_skipped else {Status.PASSED}
        bad = [r for r in self.doc["cells"] if r["status"] not in ok]
        if bad:
            self._fail(f"{len(bad)} of {len(self.doc['cells'])} cells did not pass:", bad)

    def assert_status(self, pattern: str, status: str, *, reason: str | None = None) -> None:
        """Every cell matching the glob ``pattern`` (at least one) has ``status``.

        :param reason: a regular expression the skip reason or error message must match.
        """
        matched = self.select(pattern)
        if not matched:
            raise AssertionError(f"no cell matches {pattern!r}; cells are: {', '.join(self.ids) or '(none)'}")
        wrong = [r for r in matched if r["status"] != status]
        if wrong:
            self._fail(f"expected status {status!r} for {pattern!r}, got:", wrong)
        if reason is not None:
            for r in matched:
                evidence = r.get("evidence") or {}
                text = str(evidence.get("reason") or evidence.get("message") or "")
                if not re.search(reason, text):
                    raise AssertionError(f"{r['id']}: evidence {text!r} does not match {reason!r}")


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
    device: str = "cpu",
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
    :param measure: the ``[measure]`` table for suites without one.
    :raises UsageError: ``isolated`` together with plugin objects.
    :raises SuiteFileError, PluginError: as ``ampsuite run`` would report them.
    """
    from ampsuite.host import session
    from ampsuite.run import runner
    from ampsuite.spec import suitefile
    from ampsuite.spec.suitefile import SuiteSpec

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

    Runs on CPU with the objects registered through ``ampsuite_plugin``;
    every call writes into a fresh temporary directory. See :func:`run_suite`
    for every argument.
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
