"""Isolation: one worker process per cell, a timeout, and exactly one record per cell.

With ``[measure] processes = N`` a single-process cell is measured by N fresh
workers one after another (each with the full timeout) and its record pools
their samples (:func:`pool_outcomes`); the first that does not pass is the
cell's record instead.

The parent never measures anything itself: it starts a worker, waits for its
result or its death, classifies the outcome, writes the record atomically and
moves on. A worker runs in its own process group, so a timed-out or
interrupted cell is killed together with its DataLoader workers.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, Protocol

from suite import results
from suite.contract.wire import Cell
from suite.host import environment
from suite.host.manager import PluginSettings, Registry
from suite.host.session import Plan
from suite.run import measure
from suite.spec.suitefile import SuiteSpec

__all__ = [
    "Observer",
    "RunConfig",
    "base_record",
    "backup_path",
    "now",
    "open_results",
    "pool_outcomes",
    "process_count",
    "run_cells",
    "run_plan",
    "run_record",
    "sigterm_interrupts",
    "worker_context",
]

STDERR_TAIL_BYTES = 4000
KILL_GRACE_SECONDS = 5.0
PEAKS_TIMEOUT = {"cpu": 60.0, "cuda": 300.0}


class Observer(Protocol):
    """What the runner tells the display."""

    def run_started(self, total: int, path: Path) -> None: ...
    def cell_started(self, index: int, cell: Cell) -> None: ...
    def cell_finished(self, index: int, record: dict[str, Any]) -> None: ...
    def message(self, text: str) -> None: ...


@dataclass
class RunConfig:
    """How to run the cells of one suite."""

    output: Path
    plugins: PluginSettings = field(default_factory=PluginSettings)
    resume: bool = False
    in_process: bool = False
    data_dir: Path = Path("reports/data")
    timeout: float | None = None
    measure_peaks: bool = True
    refresh_peaks: bool = False
    argv: Sequence[str] = ()


def now() -> str:
    """The current UTC time as records and run headers write it (ISO 8601, to the second)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def worker_context() -> BaseContext:
    """The multiprocessing context cells run in: a fork server with torch preloaded on Linux, spawn elsewhere."""
    if sys.platform.startswith("linux"):
        from plugins import BUILTIN_IMPLEMENTATIONS, BUILTIN_PLUGINS

        ctx = mp.get_context("forkserver")
        # The fork server imports torch and the built-ins once; each worker is
        # a fork of it, and no CUDA context exists before the fork.
        ctx.set_forkserver_preload(["suite.run.worker", *BUILTIN_PLUGINS, *BUILTIN_IMPLEMENTATIONS])
        return ctx
    return mp.get_context("spawn")


def _kill_group(proc: Any) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.kill()
    proc.join(KILL_GRACE_SECONDS)


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - STDERR_TAIL_BYTES))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _signal_name(code: int | None) -> str | None:
    if code is None or code >= 0:
        return None
    with contextlib.suppress(ValueError):
        return signal.Signals(-code).name
    return f"signal {-code}"


def _in_worker(
    ctx: BaseContext, target: Callable[..., None], args: tuple[Any, ...], timeout: float, log: Path
) -> tuple[str, Any]:
    """Run ``target(*args, conn)`` in a fresh process.

    :return: ("result", value) | ("timeout", None) | ("crashed", exitcode)
    """
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(*args, sender), daemon=False)  # type: ignore[attr-defined]
    proc.start()
    sender.close()
    try:
        if receiver.poll(timeout):
            try:
                value = receiver.recv()
            except (EOFError, OSError):
                proc.join(KILL_GRACE_SECONDS)
                return "crashed", proc.exitcode
            proc.join(KILL_GRACE_SECONDS)
            if proc.is_alive():
                _kill_group(proc)
            return "result", value
        _kill_group(proc)
        return "timeout", None
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        receiver.close()


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"received {signal.Signals(signum).name}")


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block SIGTERM raises KeyboardInterrupt like Ctrl-C, so both end a run the same way."""
    previous = signal.signal(signal.SIGTERM, _sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _RunSignals:
    """The signal handling of one run: SIGTERM acts as Ctrl-C; after the first
    interruption both are ignored, so that an impatient second Ctrl-C cannot stop
    the records of the remaining cells (and the run's end) from being written."""

    def __init__(self) -> None:
        self.previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        signal.signal(signal.SIGTERM, _sigterm)

    def defer(self) -> None:
        for sig in self.previous:
            signal.signal(sig, signal.SIG_IGN)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def base_record(cell: Cell, registry: Registry) -> dict[str, Any]:
    """A record of ``cell`` with every field present and nothing measured yet (status None)."""
    return {
        "id": cell.id,
        "status": None,
        "device": cell.device,
        "batch_size": cell.batch_size,
        "world_size": cell.world_size,
        "combination": cell.combination,
        "baseline": cell.baseline,
        "workload": {
            "id": cell.workload_id,
            "plugin": cell.workload,
            "options": cell.options,
            "axes": cell.axes,
            "unit": registry.workloads[cell.workload].unit,
            "precision_option": registry.workloads[cell.workload].precision_option,
        },
        "techniques": [{"name": n, "options": o} for n, o in cell.techniques],
        "started": now(),
        "wall_seconds": 0.0,
        "metrics": {},
        "numerics": None,
        "diagnostics": {},
        "notes": {},
        "warnings": [],
        "evidence": None,
    }


def _new_document(spec: SuiteSpec, config: RunConfig, device: str, registry: Registry) -> dict[str, Any]:
    return {
        "format": results.FORMAT,
        "version": results.VERSION,
        "run": {
            "id": dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ"),
            "started": now(),
            "finished": None,
            "argv": list(config.argv),
            "suite": {
                "name": spec.name,
                "path": spec.path,
                "sha256": spec.sha256,
                "baseline": spec.baseline,
                "device": device,
                "numerics_tolerance": spec.numerics_tolerance,
            },
            "measure": asdict(spec.measure),
            "plugins": [asdict(p) for p in registry.plugins],
        },
        "environment": environment.collect(device),
        "cells": [],
    }


def backup_path(out: Path) -> Path:
    """A free name for the previous results file: ``NAME.STAMP.json`` after its mtime, then ``NAME.STAMP-1.json``, ...

    Two earlier runs can share the mtime's second (or a clock can be reset), and a
    rename onto an existing backup would silently replace it.
    """
    stamp = dt.datetime.fromtimestamp(out.stat().st_mtime, dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    candidate = out.with_name(f"{out.stem}.{stamp}{out.suffix}")
    n = 0
    while candidate.exists():
        n += 1
        candidate = out.with_name(f"{out.stem}.{stamp}-{n}{out.suffix}")
    return candidate


def open_results(
    spec: SuiteSpec, config: RunConfig, device: str, registry: Registry, ids: set[str]
) -> results.ResultsWriter:
    """The writer of this run's results file: resumed from ``config.output`` when asked, else a new
    document (an existing file is renamed to :func:`backup_path`, never overwritten)."""
    doc = _new_document(spec, config, device, registry)
    out = config.output
    if config.resume and out.exists():
        old = results.load(out)
        results.check_comparable(str(out), old["environment"], doc["environment"])
        old["cells"] = [r for r in old["cells"] if r["status"] in results.TERMINAL and r["id"] in ids]
        old["run"]["finished"] = None
        old["run"].setdefault("resumed", []).append(now())
        return results.ResultsWriter(out, old)
    if out.exists():
        # Never overwrite measurements: the previous file is kept beside the new one.
        out.rename(backup_path(out))
    return results.ResultsWriter(out, doc)


def _measure_peaks(
    ctx: BaseContext, device: str, refresh: bool, log: Path, observer: Observer
) -> dict[str, Any] | None:
    from suite.run import worker

    kind, value = _in_worker(ctx, worker.peaks_main, (device, refresh, str(log)), PEAKS_TIMEOUT[device], log)
    if kind == "result" and "peaks" in value:
        return dict(value["peaks"])
    observer.message(f"device peaks not measured ({kind}: {value.get('error') if isinstance(value, dict) else value})")
    return None


def _payload(spec: SuiteSpec, cell: Cell, config: RunConfig, log: Path) -> dict[str, Any]:
    return {
        "cell": cell.as_dict(),
        "measure": asdict(spec.measure),
        "seed": spec.seed,
        "data_dir": str(config.data_dir),
        "plugins": config.plugins.as_dict(),
        "log_path": str(log),
        "memory_limit_bytes": int(spec.memory_limit_gb * 2**30),
        "cpu_threads": spec.cpu_threads,
    }


WORKER_STATUSES = ("passed", "skipped", "failed", "oom")
"""What a worker may say about its own cell; timeout, crashed and interrupted are the runner's to say."""
WORKER_FIELDS: dict[str, tuple[type, ...]] = {
    "status": (str,),
    "metrics": (dict,),
    "numerics": (dict, type(None)),
    "diagnostics": (dict,),
    "notes": (dict,),
    "warnings": (list,),
    "evidence": (dict, type(None)),
}


def _json_problem(value: Any, where: str) -> str | None:
    """The first place where ``value`` is not strict JSON data (finite numbers, string keys), or None."""
    if value is None or isinstance(value, bool | int | str):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where}: non-finite number {value!r}"
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            problem = _json_problem(item, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where}: key {key!r} is not a string"
            problem = _json_problem(item, f"{where}.{key}" if where else key)
            if problem:
                return problem
        return None
    return f"{where}: a {type(value).__name__} is not JSON data"


def malformed(result: Any) -> str | None:
    """Why a worker's result cannot become a record (None when it can).

    A plugin runs inside the worker and can put anything into metrics, notes
    or diagnostics; what the parent writes must stay strict JSON, and a worker
    must not claim a status only the parent can observe.
    """
    if not isinstance(result, dict):
        return f"expected a dict, got a {type(result).__name__}"
    unknown = sorted(str(k) for k in result if k not in WORKER_FIELDS)
    if unknown:
        return f"unexpected field {unknown[0]!r}"
    if result.get("status") not in WORKER_STATUSES:
        return f"status {result.get('status')!r} is not one of {', '.join(WORKER_STATUSES)}"
    for name, kinds in WORKER_FIELDS.items():
        if name in result and not isinstance(result[name], kinds):
            return f"{name}: expected {' or '.join(k.__name__ for k in kinds)}, got a {type(result[name]).__name__}"
    if not all(isinstance(w, str) for w in result.get("warnings", [])):
        return "warnings: expected a list of strings"
    return _json_problem(result, "")


def _checked(result: Any, log: Path) -> dict[str, Any]:
    problem = malformed(result)
    if problem is None:
        return dict(result)
    return {
        "status": "failed",
        "evidence": {
            "type": "MalformedResult",
            "message": f"malformed result from worker: {problem}",
            "stderr_tail": _tail(log),
        },
    }


def _attempt(
    ctx: BaseContext | None,
    spec: SuiteSpec,
    cell: Cell,
    config: RunConfig,
    log: Path,
    timeout: float,
    registry: Registry,
) -> dict[str, Any]:
    """One process's measurement of ``cell`` (a fresh worker, or this process when ``ctx`` is None)."""
    from suite.run import worker

    payload = _payload(spec, cell, config, log)
    if ctx is None:
        state: dict[str, Any] = {}
        try:
            return _checked(worker.run_cell(payload, state, registry), log)
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            return worker.classify(exc, state)
    kind, value = _in_worker(ctx, worker.main, (payload,), timeout, log)
    if kind == "result":
        return _checked(value, log)
    if kind == "timeout":
        return {"status": "timeout", "evidence": {"timeout_seconds": timeout, "stderr_tail": _tail(log)}}
    return {
        "status": "crashed",
        "evidence": {"exitcode": value, "signal": _signal_name(value), "stderr_tail": _tail(log)},
    }


def _interrupted(log: Path) -> dict[str, Any]:
    return {"status": "interrupted", "evidence": {"reason": "interrupted while running", "stderr_tail": _tail(log)}}


def process_count(spec: SuiteSpec, cell: Cell) -> int:
    """How many processes measure ``cell``: ``[measure] processes``, or 1 for a data-parallel cell.

    A data-parallel cell's record combines its ranks (:mod:`suite.run.distributed`);
    pooling several such runs is not done, so ``processes`` does not apply to it.
    """
    return spec.measure.processes if cell.world_size <= 1 else 1


def _outcome(
    ctx: BaseContext | None,
    spec: SuiteSpec,
    cell: Cell,
    config: RunConfig,
    log: Path,
    timeout: float,
    registry: Registry,
) -> dict[str, Any]:
    """The cell's outcome from :func:`process_count` attempts, one after another, each exactly as a single one.

    The first attempt that does not pass is the outcome (its ``evidence`` gains
    ``process``, 1-based, when there is more than one); when all pass, their
    samples are pooled by :func:`pool_outcomes`.
    """
    n = process_count(spec, cell)
    if n == 1:
        return _attempt(ctx, spec, cell, config, log, timeout, registry)
    passed = []
    for i in range(1, n + 1):
        attempt_log = log if i == 1 else log.with_name(f"{log.stem}-process{i}{log.suffix}")
        try:
            outcome = _attempt(ctx, spec, cell, config, attempt_log, timeout, registry)
        except KeyboardInterrupt:
            outcome = _interrupted(attempt_log)
        if outcome.get("status") != "passed":
            if isinstance(outcome.get("evidence"), dict):
                outcome = {**outcome, "evidence": {**outcome["evidence"], "process": i}}
            return outcome
        passed.append(outcome)
    return pool_outcomes(passed, spec.measure.noise_target)


def pool_outcomes(outcomes: Sequence[dict[str, Any]], noise_target: float) -> dict[str, Any]:
    """One outcome from the passed outcomes of several processes measuring the same cell.

    The first outcome, with ``metrics.step_time`` recomputed from every
    process's samples pooled in order (:func:`suite.run.measure.pool`: its ``noise``
    is the larger of the pooled noise and the between-process noise of the
    medians), ``metrics.step_time.processes`` listing each process's median,
    noise and steps, ``throughput`` and ``tflops`` from the pooled median, and
    the timing warnings (:func:`suite.run.measure.timing_warnings`) rewritten for the
    pooled figures; the first outcome's other warnings are kept.
    """
    first = outcomes[0]
    if len(outcomes) == 1:
        return first
    step_times = [(o.get("metrics") or {}).get("step_time") or {} for o in outcomes]
    runs: list[list[float]] = [st.get("samples") or [] for st in step_times]
    if not all(isinstance(r, list) and r for r in runs):  # a worker that passed always records its samples
        note = "processes not pooled: a process recorded no samples"
        return {**first, "warnings": [*first.get("warnings", []), note]}
    stats = measure.pool(runs)
    metrics = dict(first["metrics"])
    metrics["step_time"] = {
        **stats.as_dict([s for r in runs for s in r]),
        "processes": [{"median": st["median"], "noise": st["noise"], "n": st["n"]} for st in step_times],
    }
    measure.rates(metrics, stats.median)
    # The first process's own timing warnings are exactly what the same function said of its samples.
    own = measure.timing_warnings(measure.summarize(runs[0]), noise_target)
    warnings = [w for w in first.get("warnings", []) if w not in own]
    at = next((i for i, w in enumerate(first.get("warnings", [])) if w in own), len(warnings))
    warnings[at:at] = measure.timing_warnings(stats, noise_target)
    return {**first, "metrics": metrics, "warnings": warnings}


def run_record(
    ctx: BaseContext | None,
    spec: SuiteSpec,
    cell: Cell,
    config: RunConfig,
    log: Path,
    timeout: float,
    registry: Registry,
) -> dict[str, Any]:
    """Run ``cell`` (in a worker from ``ctx``, or in this process when None) and return its complete record.

    The one code path from a cell to its record, shared by ``ampsuite run`` and
    ``ampsuite max-batch``. With ``[measure] processes`` > 1 the cell runs in
    that many workers, one after another, each with ``timeout`` (see
    :func:`pool_outcomes`). Ctrl-C (or SIGTERM under :func:`sigterm_interrupts`)
    while the cell runs is not raised: the worker is killed and the record's
    status is ``interrupted``, which only this function gives; the caller
    writes the record and decides what interruption means for the rest.
    """
    record = base_record(cell, registry)
    t0 = time.perf_counter()
    try:
        outcome = _outcome(ctx, spec, cell, config, log, timeout, registry)
    except KeyboardInterrupt:
        outcome = _interrupted(log)
    record.update({k: v for k, v in outcome.items() if v is not None or k == "evidence"})
    record["wall_seconds"] = time.perf_counter() - t0
    return record


NOT_STARTED = "not started: the run was interrupted before this cell"


def _not_run(cell: Cell, registry: Registry, status: str, reason: str) -> dict[str, Any]:
    record = base_record(cell, registry)
    record["status"] = status
    record["evidence"] = {"reason": reason}
    return record


def run_cells(
    spec: SuiteSpec,
    cells: Sequence[Cell],
    registry: Registry,
    device: str,
    config: RunConfig,
    observer: Observer,
) -> tuple[dict[str, Any], bool]:
    """Run every cell and write its record; returns (document, interrupted).

    Records are written as each cell ends, so a killed run keeps what it
    finished; ``config.resume`` skips cells that already have a terminal record.
    Ctrl-C or SIGTERM, wherever it lands (peaks, a cell, between cells), ends
    the run the same way: the running cell and every cell after it are
    recorded as ``interrupted``, and the document is returned as usual, so
    the caller still prints its summary.
    """
    writer = open_results(spec, config, device, registry, {c.id for c in cells})
    kept = {r["id"]: r for r in writer.doc["cells"]}
    ctx = None if config.in_process else worker_context()
    timeout = config.timeout or spec.timeout
    interrupted = False
    logdir = Path(tempfile.mkdtemp(prefix="ampsuite-logs-"))
    with contextlib.ExitStack() as stack:
        # Run in reverse: the records are put in order and the run's end written
        # while the run's signal handling still holds, then the handlers are restored.
        stack.callback(shutil.rmtree, logdir, ignore_errors=True)
        signals = _RunSignals()
        stack.callback(signals.restore)
        stack.callback(_finish, writer, [c.id for c in cells])

        def interrupt() -> None:
            nonlocal interrupted
            interrupted = True
            signals.defer()

        try:
            observer.run_started(len(cells), config.output)
            if config.measure_peaks and writer.doc["environment"].get("peaks") is None and ctx is not None:
                writer.doc["environment"]["peaks"] = _measure_peaks(
                    ctx, device, config.refresh_peaks, logdir / "peaks.log", observer
                )
                writer.flush()
        except KeyboardInterrupt:
            interrupt()
            observer.message("interrupted before the first cell (while measuring the device's peaks)")
        for index, cell in enumerate(cells):
            try:
                if cell.id in kept:
                    observer.cell_finished(index, kept[cell.id])
                    continue
                if interrupted:
                    record = _not_run(cell, registry, "interrupted", NOT_STARTED)
                elif cell.skip_reason:
                    record = _not_run(cell, registry, "skipped", cell.skip_reason)
                else:
                    observer.cell_started(index, cell)
                    record = run_record(ctx, spec, cell, config, logdir / f"cell-{index}.log", timeout, registry)
                    if record["status"] == "interrupted":
                        interrupt()
                writer.add(record)
                observer.cell_finished(index, record)
                for err in _notify(registry, record):
                    observer.message(err)
            except KeyboardInterrupt:
                # Outside a worker's wait (the display, a hook, a write): the cell did
                # not start, or its record is written already.
                interrupt()
                if not writer.has(cell.id):
                    record = _not_run(cell, registry, "interrupted", NOT_STARTED)
                    writer.add(record)
                    observer.cell_finished(index, record)
    return writer.doc, interrupted


def _finish(writer: results.ResultsWriter, ids: list[str]) -> None:
    writer.order(ids)
    writer.doc["run"]["finished"] = now()
    writer.flush()


def _notify(registry: Registry, record: dict[str, Any]) -> list[str]:
    errors = []
    for impl in registry.hook.ampsuite_cell_finished.get_hookimpls():
        try:
            impl.function(record=record)
        except Exception as exc:  # an observer must not stop the run
            errors.append(
                f"warning: plugin {impl.plugin_name!r} ampsuite_cell_finished raised {type(exc).__name__}: {exc}"
            )
    return errors


def run_plan(p: Plan, config: RunConfig, observer: Observer) -> tuple[dict[str, Any], bool]:
    """Run a plan's cells (:func:`suite.host.session.plan`); returns (results document, interrupted)."""
    config.plugins = p.settings
    return run_cells(p.spec, p.cells, p.registry, p.device, config, observer)
