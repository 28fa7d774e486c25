"""Isolation: one worker process per cell, a timeout, and exactly one record per cell.

With ``[measure] processes = N`` a single-process cell is measured by N fresh
workers one after another (:mod:`suite.run.pool`).

The parent never measures anything itself: it starts a worker, waits for its
result or its death, classifies the outcome (:mod:`suite.run.attempt`), writes
the record atomically and moves on. A worker runs in its own process group, so
a timed-out or interrupted cell is killed together with its DataLoader workers.
This module holds the loop over the cells, the run's signal handling and the
results file.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import multiprocessing as mp
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, Protocol

from suite import results
from suite.contract.wire import Cell, Outcome, Status
from suite.host import environment
from suite.host.manager import PluginSettings, Registry
from suite.host.session import Plan
from suite.run import attempt
from suite.run.attempt import CellJob, in_worker
from suite.run.pool import measure_processes, pool_outcomes, process_count
from suite.spec.suitefile import SuiteSpec

__all__ = [
    "CellJob",
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
        **({"nodes": cell.nodes} if cell.nodes > 1 else {}),
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

    kind, value = in_worker(ctx, worker.peaks_main, (device, refresh, str(log)), PEAKS_TIMEOUT[device], log)
    if kind == "result" and "peaks" in value:
        return dict(value["peaks"])
    if kind == "result":
        why = f"{kind}: {value.get('error') if isinstance(value, dict) else value}"
    elif kind == "timed out":  # the value is the process's stack dump, too long for a one-line message
        why = f"timed out after {PEAKS_TIMEOUT[device]:g} s"
    else:
        why = f"{kind}: exit code {value}"
    observer.message(f"device peaks not measured ({why})")
    return None


def run_record(job: CellJob) -> dict[str, Any]:
    """Run ``job.cell`` (in a worker from ``job.ctx``, or in this process when None) and return its complete record.

    The one code path from a cell to its record, shared by ``ampsuite run`` and
    ``ampsuite max-batch``. With ``[measure] processes`` > 1 the cell runs in
    that many workers, one after another, each with ``job.timeout`` (see
    :func:`pool_outcomes`). Ctrl-C (or SIGTERM under :func:`sigterm_interrupts`)
    while the cell runs is not raised: the worker is killed and the record's
    status is ``interrupted``, which only this function gives; the caller
    writes the record and decides what interruption means for the rest.
    """
    record = base_record(job.cell, job.registry)
    t0 = time.perf_counter()
    try:
        outcome: Outcome = measure_processes(job)
    except KeyboardInterrupt:
        outcome = attempt.interrupted_outcome(job.log)
    record.update({k: v for k, v in outcome.items() if v is not None or k == "evidence"})
    record["wall_seconds"] = time.perf_counter() - t0
    return record


NOT_STARTED = "not started: the run was interrupted before this cell"


def _not_run(cell: Cell, registry: Registry, status: Status, reason: str) -> dict[str, Any]:
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
                    record = _not_run(cell, registry, Status.INTERRUPTED, NOT_STARTED)
                elif cell.skip_reason:
                    record = _not_run(cell, registry, Status.SKIPPED, cell.skip_reason)
                else:
                    observer.cell_started(index, cell)
                    log = logdir / f"cell-{index}.log"
                    record = run_record(CellJob(ctx, spec, cell, config, log, timeout, registry))
                    if record["status"] == Status.INTERRUPTED:
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
                    record = _not_run(cell, registry, Status.INTERRUPTED, NOT_STARTED)
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
