"""Shared fixtures and helpers of the core tests.

Suites are built as data: ``toy_suite`` (the toy workload and whatever a test
varies) and ``suite_toml`` (any suite) give the TOML text, with the measure
tables ``FAST_MEASURE`` and ``SLOW_MEASURE``; a test writes suite-file text
itself only where that text is what it checks. ``healthy_run`` and
``run_in_workers`` are real runs through isolated workers; the process helpers
read what a test's processes left behind from /proc. Results records and
documents are built in records.py.

Installed third-party plugins must not leak into these tests: plugin autoload
is off for the whole session unless the environment says otherwise (the
entry-point test turns it back on for its own subprocess only).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ampsuite.testing import suite_text

REPO = Path(__file__).resolve().parents[1]
AUTOLOAD_ENV = "AMPSUITE_DISABLE_PLUGIN_AUTOLOAD"
PLUGINS_ENV = "AMPSUITE_PLUGINS"
FAULTS = "ampsuite.plugins.faults"

FAST_MEASURE: dict[str, Any] = {
    "warmup_steps": 1,
    "min_steps": 3,
    "max_steps": 5,
    "numerics_steps": 2,
    "max_seconds": 0.5,
}
"""A [measure] table that makes a toy cell take well under a second on a CPU."""

SLOW_MEASURE: dict[str, Any] = {**FAST_MEASURE, "max_steps": 100000, "noise_target": 1e-7, "max_seconds": 1.5}
"""A [measure] table whose cells each measure for 1.5 s: long enough to signal a run while a cell runs."""

TOY: dict[str, Any] = {"batch_size": 8, "hidden": 16}
"""The toy workload's options in most suites here: one small MLP cell a combination."""

SMALL_BERT: dict[str, Any] = {
    "plugin": "bert",
    "batch_size": 2,
    "layers": 1,
    "hidden": 32,
    "heads": 2,
    "intermediate": 64,
    "seq_len": 16,
    "vocab": 100,
}
"""A workload table of BERT at a size a CPU steps through in milliseconds: one layer 32 wide."""


def suite_toml(data: Mapping[str, Any], measure: Mapping[str, Any] | None = FAST_MEASURE) -> str:
    """TOML text of a suite given as plain data (tables as dicts); ``measure`` is its [measure] table unless ``data``
    has one (None: none)."""
    return suite_text(data, measure)[0]


def toy_suite(
    name: str | None,
    *,
    toy: Mapping[str, Any] | None = TOY,
    workloads: Mapping[str, Mapping[str, Any]] | None = None,
    combinations: Mapping[str, Sequence[str]] | None = None,
    techniques: Mapping[str, Mapping[str, Any]] | None = None,
    measure: Mapping[str, Any] | None = FAST_MEASURE,
    tables: Mapping[str, Any] | None = None,
    **suite_keys: Any,
) -> str:
    """TOML text of a CPU suite: ``name`` and ``suite_keys`` in its [suite] table, the toy workload with the options
    ``toy`` and any other ``workloads``, the ``combinations`` (FP32 alone unless given) with their ``techniques``
    options, more top-level ``tables`` (``executor``, ``tune``, ``combination_options``, ``include``...) and
    ``measure``. None leaves a part out: a [suite] key (``name`` and ``device`` too; an empty [suite] table goes), the
    toy workload or the [measure] table."""
    suite = {key: value for key, value in {"name": name, "device": "cpu", **suite_keys}.items() if value is not None}
    data: dict[str, Any] = {"suite": suite} if suite else {}
    data |= {
        "workloads": ({"toy": dict(toy)} if toy is not None else {}) | dict(workloads or {}),
        "combinations": dict(combinations) if combinations is not None else {"fp32": []},
    }
    if techniques:
        data["techniques"] = techniques
    data |= tables or {}
    return suite_toml(data, measure)


SLOW_FIXTURES = {
    ("test_runner", "fault_runs"),
    ("test_faults", "cpu_run"),
    ("test_maxbatch", "cpu_search"),
    ("test_nodes", "nodes_run"),
    ("test_distributed", "ddp_run"),
    ("test_inference", "inference_run"),
    ("test_contracts", "records"),
}
"""Module-scoped fixtures that run a real suite in worker processes: every test on one is in the slow tier (the
fast tier's time would otherwise depend on which of them runs first)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        name = module.__name__.rpartition(".")[2] if module is not None else ""
        if any((name, f) in SLOW_FIXTURES for f in getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def pytest_configure(config: pytest.Config) -> None:
    # Set before any test imports ampsuite.host.manager, and inherited by every
    # subprocess and worker the tests start.
    os.environ.setdefault(AUTOLOAD_ENV, "1")
    # The fault-injection plugin is opt-in for users; the tests inject faults everywhere.
    os.environ.setdefault(PLUGINS_ENV, FAULTS)


SuiteWriter = Callable[..., Path]


def shipped_plugin_autoloads() -> bool:
    """Whether pytest loaded ampsuite.testing through ampsuite's pytest11 entry point.

    Reads every distribution, not deduplicated by name, as pytest (pluggy) does:
    a stale ampsuite.egg-info in the working directory must not hide the entry point.
    """
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    return any(
        ep.group == "pytest11" and ep.value == "ampsuite.testing"
        for dist in importlib.metadata.distributions()
        for ep in dist.entry_points
    )


def in_float64(step: Any) -> Any:
    """A built ``TrainStep`` trained in float64: its model (the same Parameter objects, so the optimizer built
    with it keeps them) and the inputs its data serves. For tests that compare two trainings step by step:
    batch norm over a few images amplifies a float32 summation-order difference about tenfold a step (5e-5 in a
    ResNet-18's conv1 weights after three steps, on one CPU), where float64 keeps it far below any tolerance."""
    from ampsuite import Batch  # the core tests' conftest imports no torch at collection

    served = step.data

    def data() -> Batch:
        batch = served()
        return Batch(tuple(t.double() for t in batch.inputs), batch.target)

    step.model.double()
    step.data = data
    return step


@pytest.fixture
def write_suite(tmp_path: Path) -> SuiteWriter:
    """``write_suite(text, name="suite.toml")`` writes a dedented suite file into tmp_path and returns its path."""

    def write(text: str, name: str = "suite.toml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture(scope="session")
def registry() -> Any:
    """The built-in plugins and the opt-in fault plugin (autoload off), loaded once: loading imports torch."""
    from ampsuite.host.manager import PluginSettings, load_registry

    return load_registry(PluginSettings(extra=(FAULTS,), autoload=False))


def healthy_suite(**changes: Any) -> str:
    """Two toy cells that pass, FP32 and the no-op technique; ``changes`` are toy_suite arguments."""
    return toy_suite(**{"name": "healthy", "timeout": 120, "combinations": {"fp32": [], "noop": ["noop"]}, **changes})


@pytest.fixture(scope="session")
def healthy_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A real two-cell toy run through isolated workers: (results path, document as returned by the runner)."""
    suite_path = tmp_path_factory.mktemp("healthy") / "healthy.toml"
    suite_path.write_text(healthy_suite(), encoding="utf-8")
    return run_in_workers(suite_path)


def run_in_workers(suite_path: Path, **plan_options: Any) -> tuple[Path, dict[str, Any]]:
    """A real CPU run of the suite file through isolated workers, into results.json and data/ beside it: (results
    path, document as returned by the runner). ``plan_options`` go to ``session.plan`` (``keyword=...``)."""
    from ampsuite.host import session
    from ampsuite.run import runner

    out = suite_path.parent / "results.json"
    plan = session.plan(suite_path, device="cpu", **plan_options)
    config = runner.RunConfig(output=out, data_dir=suite_path.parent / "data", measure_peaks=False, argv=["test"])
    doc, interrupted = runner.run_plan(plan, config, QuietObserver())
    assert not interrupted
    return out, doc


class QuietObserver:
    """A runner observer that only remembers what it was told."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[tuple[str, str]] = []
        self.messages: list[str] = []

    def run_started(self, total: int, path: Path) -> None:
        self.total = total

    def cell_started(self, index: int, cell: Any) -> None:
        self.started.append(cell.id)

    def cell_finished(self, index: int, record: dict[str, Any]) -> None:
        self.finished.append((record["id"], record["status"]))

    def message(self, text: str) -> None:
        self.messages.append(text)


@pytest.fixture
def observer() -> QuietObserver:
    return QuietObserver()


def wait_for(predicate: Callable[[], Any], seconds: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned), or fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


# --- processes: what a test sees of the ampsuite processes it starts (Linux /proc) ------------------------------


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not)."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None and st[1] == pid and st[0] not in ("Z", "X"):
                out.append(int(entry.name))
    return out


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_gone(pids: Sequence[int], seconds: float = 20.0) -> list[int]:
    """The processes of ``pids`` still alive after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def as_a_shell_starts_it() -> None:
    """SIGINT at its default and unblocked in the child, as a shell starts a foreground command. A child inherits
    an ignored SIGINT across exec, and Python then never raises KeyboardInterrupt. The pytest process has it
    ignored whenever the tests run as a background job of a non-interactive shell (`.ci/run &`: POSIX shells
    start such jobs with SIGINT and SIGQUIT ignored); there this run finished its cells with SIGINT sent and
    exited 0, which is not the behaviour under test."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_ampsuite(
    *argv: str, cwd: Path, pythonpath: str | Path = "", timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -m ampsuite ARGV`` in ``cwd`` to its end, output captured; ``pythonpath`` (plugin modules) first
    on the path, then this checkout."""
    path = os.pathsep.join(str(p) for p in (pythonpath, REPO) if p)
    return subprocess.run(
        [sys.executable, "-m", "ampsuite", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": path},
    )


def start_foreground(argv: Sequence[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``python -m ampsuite ARGV`` as a terminal's foreground job: a process group of its own (Ctrl-C goes to the
    group: ``os.killpg(proc.pid, signal.SIGINT)``), SIGINT at its default, output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "ampsuite", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=as_a_shell_starts_it,
        cwd=cwd,
        env=env,
    )


@contextlib.contextmanager
def reaped(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """``proc``, killed with its process group when the block ends while it still runs."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
