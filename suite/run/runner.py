"""Isolation: one worker process per cell, a timeout, and exactly one record per cell.

With ``[measure] processes = N`` a single-process cell is measured by N fresh
workers one after another (:mod:`ampsuite.run.pool`).

The parent never measures anything itself: it starts a worker, waits for its
result or its death, classifies the outcome (:mod:`ampsuite.run.attempt`), writes
the record atomically and moves on. A worker runs in its own process group, so
a timed-out or interrupted cell is killed together with its DataLoader workers.
This module holds the loop over the cells, the run's signal handling and the
results file.

Where a cell's :func:`run_record` happens is the executor's choice (a plugin
record, :class:`ampsuite.Executor`): ``local`` calls each :class:`Task` here, one
after another; ``slurm`` submits them as jobs. Whatever the executor, this
module writes every record into the one results file the moment the executor
yields it, records skipped cells, keeps finished ones under ``--resume``, and
ends an interrupted run the same way.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import multiprocessing as mp
import shutil
import signal
import sys
import tempfile
import time
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, Protocol

from ampsuite import results
from ampsuite.contract import wire
from ampsuite.contract.errors import AmpsuiteError, PluginError
from ampsuite.contract.plugin import REMEMBER_BYTES, ExecutorContext
from ampsuite.contract.wire import Cell, Outcome, Status
from ampsuite.host import environment, executors
from ampsuite.host.manager import PluginSettings, Registry, load_registry
from ampsuite.host.session import Plan
from ampsuite.run import attempt, definition
from ampsuite.run.attempt import CellJob, in_worker
from ampsuite.run.pool import measure_processes, pool_outcomes, process_count
from ampsuite.spec.suitefile import SuiteSpec

__all__ = [
    "CellJob",
    "Observer",
    "RunConfig",
    "Task",
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
    executor: str | None = None
    """The executor's name (``--executor``); None: the suite file's ``[executor] name``, else ``local``."""
    executor_options: Mapping[str, Any] = field(default_factory=dict)
    """Executor options that override the suite file's (``--executor-option KEY=VALUE``)."""


def now() -> str:
    """The current UTC time as records and run headers write it (ISO 8601, to the second)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def worker_context(registry: Registry) -> BaseContext:
    """The multiprocessing context cells run in: a fork server with torch preloaded on Linux, spawn elsewhere.

    :raises PluginError: when a built-in module the fork server preloads cannot be imported (the fork server
        would die, and with it every cell).
    """
    if sys.platform.startswith("linux"):
        ctx = mp.get_context("forkserver")
        # The fork server imports torch and the built-ins' implementations once; each worker is a fork of it
        # (a cell's memory limit is room above them), and no CUDA context exists before the fork. The first
        # registry of a process decides: CPython starts one fork server per process.
        preload = ["ampsuite.run.worker", *registry.own_modules()]
        ctx.set_forkserver_preload(preload)
        _check_fork_server(ctx, preload)
        return ctx
    return mp.get_context("spawn")


_fork_server_checked = False


def _nothing() -> None:
    """A process that does nothing: it starts the fork server and returns."""


def _check_fork_server(ctx: BaseContext, preload: Sequence[str]) -> None:
    """Start the fork server once per process with a process that does nothing, and say why when it dies.

    CPython's fork server skips a preloaded module that raises ImportError and dies on any other exception, after
    which each start reads an EOF: "internal error". In a fresh venv, torch 2.13.0+cpu beside a torchvision 0.28.0
    built for the CUDA torch (two package indexes) made ``import torchvision`` raise RuntimeError ("operator
    torchvision::nms does not exist") inside the server, while the parent, which never imports torchvision, was
    fine. The failing module is imported again here, in the parent, to name it.
    """
    global _fork_server_checked
    if _fork_server_checked:
        return
    process = ctx.Process(target=_nothing)  # type: ignore[attr-defined]
    try:
        process.start()
    except (EOFError, ConnectionError) as exc:
        broken = _unimportable(preload)
        if broken is None:
            raise
        module, error = broken
        raise PluginError(module, f"cannot be imported: {type(error).__name__}: {error}{_torch_builds()}") from exc
    process.join()
    _fork_server_checked = True


def _unimportable(modules: Sequence[str]) -> tuple[str, BaseException] | None:
    """The first of ``modules`` whose import raises what the fork server does not skip, with the exception."""
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        except Exception as exc:  # any other exception kills the fork server
            return module, exc
    return None


def _torch_builds() -> str:
    """The installed torch and torchvision, and what to do when they were not built for each other."""
    from importlib import metadata

    try:
        versions = f"torch {metadata.version('torch')}, torchvision {metadata.version('torchvision')}"
    except metadata.PackageNotFoundError:
        return ""
    return f" ({versions}; install a torch and a torchvision built for each other, from one package index)"


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


def copy_aside(out: Path) -> Path:
    """A copy of the results file ``out`` at :func:`backup_path`, before records in it are replaced; its path."""
    backup = backup_path(out)
    shutil.copy2(out, backup)
    return backup


def open_results(
    spec: SuiteSpec,
    config: RunConfig,
    device: str,
    registry: Registry,
    ids: set[str],
    cells: Sequence[Cell] = (),
    message: typing.Callable[[str], None] | None = None,
) -> results.ResultsWriter:
    """The writer of this run's results file: resumed from ``config.output`` when asked, else a new
    document (an existing file is renamed to :func:`backup_path`, never overwritten).

    Resuming keeps the finished records of ``ids``; of those among ``cells``, only the ones that measured
    the same definition (:func:`ampsuite.run.definition.difference`): the others run again, and the file as it
    was is copied to :func:`backup_path` first, so nothing measured is lost. Records of cells outside
    ``ids`` (a run narrowed by ``-k``) are kept as they are.
    """
    doc = _new_document(spec, config, device, registry)
    out = config.output
    if config.resume and out.exists():
        old = results.load(out)
        results.check_comparable(str(out), old["environment"], doc["environment"])
        by_id = {c.id: c for c in cells}
        changed = {}
        for r in old["cells"]:
            cell = by_id.get(r["id"])
            if cell is not None and r["status"] in results.TERMINAL:
                why = definition.difference(r, cell, registry)
                if why is not None:
                    changed[r["id"]] = why
        if changed:
            backup = copy_aside(out)
            for cell_id, why in changed.items():
                if message is not None:
                    message(f"{cell_id} runs again: its record measured other {why} (the file as it was: {backup})")
        # A record of a cell this run does not select (-k, a narrower suite) stays as it is: a resumed
        # run adds to the file, it never drops what an earlier run measured.
        old["cells"] = [
            r
            for r in old["cells"]
            if r["id"] not in changed and (r["status"] in results.TERMINAL or r["id"] not in ids)
        ]
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
    from ampsuite.run import worker

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
    except KeyboardInterrupt as exc:
        outcome = attempt.interrupted_outcome(job.log, exc)
    return _completed(record, outcome, t0)


def _completed(record: dict[str, Any], outcome: Mapping[str, Any], t0: float) -> dict[str, Any]:
    """``record`` with the outcome's keys (``evidence`` even when None) and the wall time since ``t0``."""
    record.update({k: v for k, v in outcome.items() if v is not None or k == "evidence"})
    record["wall_seconds"] = time.perf_counter() - t0
    return record


NOT_STARTED = "not started: the run was interrupted before this cell"
NOT_FINISHED = "not finished: the run was interrupted while the executor had this cell"


def _not_run(cell: Cell, registry: Registry, status: Status, reason: str) -> dict[str, Any]:
    record = base_record(cell, registry)
    record["status"] = status
    record["evidence"] = {"reason": reason}
    return record


@dataclass
class Task:
    """One cell handed to an executor (:class:`ampsuite.CellTask`): call it where the cell should run.

    In the parent it runs the cell with the run's worker context and plugins.
    Pickled (an executor sending it to another process or node), it leaves
    both behind, and the process that calls it loads the plugins again from
    ``config.plugins``, starts its own fork server and keeps the worker's log
    in a temporary folder of its own.
    """

    index: int
    cell: Cell
    spec: SuiteSpec
    config: RunConfig
    log: Path
    timeout: float
    ctx: BaseContext | None = field(default=None, repr=False)
    registry: Registry | None = field(default=None, repr=False)
    here: bool = True
    """Whether ``ctx`` and ``registry`` are this process's (False once unpickled)."""
    interrupted_here: bool = False
    """Set when Ctrl-C (or SIGTERM) stopped the cell while it ran in this process: the run ends."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(ctx=None, registry=None, here=False)
        return state

    @contextlib.contextmanager
    def _place(self) -> Iterator[tuple[Registry, BaseContext | None, Path]]:
        """The registry, worker context and log the cell runs with in this process: the run's own in the
        parent; where an unpickled task is called, the plugins loaded again, a fork server of its own and a
        temporary log folder, with a scheduler's SIGTERM (scancel, a time limit) ending the cell like Ctrl-C."""
        if self.here:
            assert self.registry is not None
            yield self.registry, self.ctx, self.log
            return
        with sigterm_interrupts():
            registry = load_registry(self.config.plugins)
            ctx = None if self.config.in_process else worker_context(registry)
            logdir = Path(tempfile.mkdtemp(prefix="ampsuite-logs-"))
            try:
                yield registry, ctx, logdir / "cell.log"
            finally:
                shutil.rmtree(logdir, ignore_errors=True)

    def _job(self, registry: Registry, ctx: BaseContext | None, log: Path) -> CellJob:
        return CellJob(ctx, self.spec, self.cell, self.config, log, self.timeout, registry)

    def __call__(self) -> dict[str, Any]:
        with self._place() as place:
            record = run_record(self._job(*place))
        if self.here:
            self.interrupted_here = record["status"] == Status.INTERRUPTED
        return record

    def node(
        self,
        *,
        node_rank: int,
        nnodes: int,
        endpoint: str,
        run_id: str,
        local_addr: str | None = None,
        share_gpus: bool = False,
    ) -> dict[str, Any]:
        """Run one node of this multi-node cell here (a cluster job's task); see :meth:`ampsuite.CellTask.node`."""
        from ampsuite.run import nodes

        with self._place() as place:
            job = self._job(*place)
            record = base_record(self.cell, job.registry)
            t0 = time.perf_counter()
            try:
                result = nodes.measure_node(
                    job,
                    node_rank=node_rank,
                    nnodes=nnodes,
                    endpoint=endpoint,
                    run_id=run_id,
                    local_addr=local_addr,
                    share_gpus=share_gpus,
                )
            except KeyboardInterrupt:
                result = attempt.interrupted_outcome(job.log)
        if "node_done" in result:
            return dict(result)
        return _completed(record, result, t0)

    def record(self, status: Status, evidence: Mapping[str, Any]) -> dict[str, Any]:
        """A record of this cell that was not measured (the executor's evidence of why)."""
        record = base_record(self.cell, self.registry or load_registry(self.config.plugins))
        record["status"] = Status(status)
        record["evidence"] = dict(evidence)
        return record


class _Memory:
    """``run.executor``: what the run's executor remembered per cell (:class:`ampsuite.ExecutorContext`'s
    ``remember``), kept in the results file until the cell's record is written.

    Under ``--resume`` the data of the killed run's executor is given back to the same executor
    (``remembered``) for the cells that are still without a record; another executor's is dropped,
    with one line saying so. The runner stays the file's only writer: ``remember`` writes through
    the run's :class:`results.ResultsWriter`.
    """

    def __init__(self, writer: results.ResultsWriter, name: str, ids: set[str], observer: Observer) -> None:
        self.writer, self.name = writer, name
        run = writer.doc["run"]
        old = run.pop("executor", None)
        jobs: dict[str, dict[str, Any]] = {}
        if isinstance(old, dict) and isinstance(old.get("jobs"), dict):
            if old.get("name") == name:
                jobs = {k: dict(v) for k, v in old["jobs"].items() if k in ids and not writer.has(k)}
            elif old["jobs"]:
                observer.message(
                    f"{len(old['jobs'])} job(s) remembered by executor {old.get('name')!r} are not reattached by "
                    f"executor {name!r} (they may still be running); their cells run again"
                )
        if jobs:
            run["executor"] = {"name": name, "jobs": jobs}

    def _jobs(self) -> dict[str, dict[str, Any]]:
        state = self.writer.doc["run"].setdefault("executor", {"name": self.name, "jobs": {}})
        return typing.cast(dict[str, dict[str, Any]], state["jobs"])

    def remembered(self, task: Any) -> Mapping[str, Any] | None:
        state = self.writer.doc["run"].get("executor")
        data = state["jobs"].get(task.cell.id) if state else None
        return copy.deepcopy(data) if data is not None else None

    def remember(self, task: Any, data: Mapping[str, Any], handed: set[int]) -> None:
        index = getattr(task, "index", None)
        if not isinstance(index, int) or index not in handed:
            raise ValueError(f"remember({task!r}, ...): not one of the tasks the executor was handed")
        if self.writer.has(task.cell.id):
            raise ValueError(f"remember: {task.cell.id} already has its record")
        if not isinstance(data, Mapping):
            raise TypeError(f"remember: expected a mapping of JSON data, got {type(data).__name__}")
        value = dict(data)
        problem = wire.json_problem(value, "data")
        if problem:
            raise ValueError(f"remember: {problem}")
        size = len(json.dumps(value))
        if size > REMEMBER_BYTES:
            raise ValueError(f"remember: {size:,} bytes of JSON; at most {REMEMBER_BYTES:,}")
        self._jobs()[task.cell.id] = copy.deepcopy(value)
        self.writer.flush()

    def forget(self, cell_id: str) -> None:
        """Drop a cell's data (its record is being written; the caller flushes)."""
        state = self.writer.doc["run"].get("executor")
        if state is not None:
            state["jobs"].pop(cell_id, None)
            if not state["jobs"]:
                del self.writer.doc["run"]["executor"]

    def prune(self) -> None:
        """Forget the data of every cell that has a record (the run's end)."""
        state = self.writer.doc["run"].get("executor")
        for cell_id in list(state["jobs"] if state else ()):
            if self.writer.has(cell_id):
                self.forget(cell_id)


def run_cells(
    spec: SuiteSpec,
    cells: Sequence[Cell],
    registry: Registry,
    device: str,
    config: RunConfig,
    observer: Observer,
) -> tuple[dict[str, Any], bool]:
    """Run every cell through the run's executor and write its record; returns (document, interrupted).

    Records are written as the executor yields them, so a killed run keeps what
    it finished; ``config.resume`` skips cells that already have a terminal
    record. Ctrl-C or SIGTERM, wherever it lands (peaks, a cell, between cells),
    ends the run the same way: the executor is closed (a batch executor cancels
    its jobs), the running cell and every cell without a record are recorded as
    ``interrupted``, and the document is returned as usual, so the caller still
    prints its summary.
    """
    chosen = executors.resolve(spec, registry.executors, config.executor, config.executor_options)
    if chosen.executor.check is not None:
        reason = chosen.executor.check(chosen.options)
        if reason:
            raise PluginError(registry.owner[("executor", chosen.executor.name)], reason)
    writer = open_results(spec, config, device, registry, {c.id for c in cells}, cells, observer.message)
    kept = {r["id"]: r for r in writer.doc["cells"]}
    local = chosen.executor.name == executors.DEFAULT
    ctx = None if config.in_process else worker_context(registry)
    timeout = config.timeout or spec.timeout
    interrupted = False
    failure: AmpsuiteError | None = None
    handed: set[int] = set()
    logdir = Path(tempfile.mkdtemp(prefix="ampsuite-logs-"))
    with contextlib.ExitStack() as stack:
        # Run in reverse: the records are put in order and the run's end written
        # while the run's signal handling still holds, then the handlers are restored.
        stack.callback(shutil.rmtree, logdir, ignore_errors=True)
        signals = _RunSignals()
        stack.callback(signals.restore)
        stack.callback(_finish, writer, [c.id for c in cells])
        memory = _Memory(writer, chosen.executor.name, {c.id for c in cells}, observer)
        stack.callback(memory.prune)  # before _finish writes the run's end

        def interrupt() -> None:
            nonlocal interrupted
            interrupted = True
            signals.defer()

        def write(index: int, record: dict[str, Any]) -> None:
            memory.forget(record["id"])  # a job is collected, or given up, once: its record is written
            writer.add(record)
            observer.cell_finished(index, record)
            for err in _notify(registry, record):
                observer.message(err)

        def tasks() -> Iterator[Task]:
            # Kept and skipped cells are recorded as the executor reaches them, so a
            # sequential executor keeps the run's order on screen.
            for index, cell in enumerate(cells):
                if interrupted:
                    return
                if cell.id in kept:
                    observer.cell_finished(index, kept[cell.id])
                elif cell.skip_reason:
                    write(index, _not_run(cell, registry, Status.SKIPPED, cell.skip_reason))
                else:
                    handed.add(index)
                    log = logdir / f"cell-{index}.log"
                    yield Task(index, cell, spec, config, log, timeout, ctx, registry)

        def started(task: Any) -> None:
            observer.cell_started(task.index, task.cell)

        try:
            observer.run_started(len(cells), config.output)
            if config.measure_peaks and writer.doc["environment"].get("peaks") is None and ctx is not None and local:
                writer.doc["environment"]["peaks"] = _measure_peaks(
                    ctx, device, config.refresh_peaks, logdir / "peaks.log", observer
                )
                writer.flush()
        except KeyboardInterrupt:
            interrupt()
            observer.message("interrupted before the first cell (while measuring the device's peaks)")
        if not interrupted:
            seconds = timeout * max(1, spec.measure.processes)
            context = ExecutorContext(
                tasks(),
                chosen.options,
                device,
                seconds,
                started,
                observer.message,
                remember=lambda task, data: memory.remember(task, data, handed),
                remembered=memory.remembered,
            )
            produced = iter(chosen.executor.run(context))
            try:
                while (item := _next(produced, registry, chosen.executor.name)) is not None:
                    task, record = item
                    _check_yield(registry, chosen.executor.name, task, record, cells, handed, writer)
                    write(task.index, dict(record))
                    if getattr(task, "interrupted_here", False):  # Ctrl-C while a cell ran in this process
                        interrupt()
                        break
            except KeyboardInterrupt:
                interrupt()
            except AmpsuiteError as exc:  # recorded below, raised once the document is complete
                failure = exc
                interrupt()
            finally:
                _close(produced)
        for index, cell in enumerate(cells):
            # Every cell the executor did not record: interrupted (resume runs it again).
            if cell.id in kept or writer.has(cell.id):
                continue
            if not interrupted and index not in handed and cell.skip_reason:
                record = _not_run(cell, registry, Status.SKIPPED, cell.skip_reason)
            else:
                if not interrupted:
                    observer.message(f"executor {chosen.executor.name!r} ended without a record of {cell.id}")
                    interrupt()
                reason = NOT_FINISHED if index in handed else NOT_STARTED
                if failure is not None:
                    reason = f"not run: {failure}"
                record = _not_run(cell, registry, Status.INTERRUPTED, reason)
            try:
                write(index, record)
            except KeyboardInterrupt:
                interrupt()
                if not writer.has(cell.id):
                    writer.add(record)
    if failure is not None:
        raise failure
    return writer.doc, interrupted


def _next(produced: Iterator[Any], registry: Registry, name: str) -> Any:
    """The executor's next (task, record), None at its end; an exception of the executor is its plugin's error."""
    try:
        return next(produced)
    except StopIteration:
        return None
    except (KeyboardInterrupt, AmpsuiteError):
        raise
    except Exception as exc:
        message = " ".join(str(exc).split())[:300]
        owner = registry.owner[("executor", name)]
        raise PluginError(owner, f"executor {name!r} raised {type(exc).__name__}: {message}") from exc


def _close(produced: Iterator[Any]) -> None:
    """Close an executor's iterator (its ``finally`` cancels what it submitted); Ctrl-C is deferred by then."""
    close = getattr(produced, "close", None)
    if close is not None:
        close()


def _check_yield(
    registry: Registry,
    name: str,
    task: Any,
    record: Any,
    cells: Sequence[Cell],
    handed: set[int],
    writer: results.ResultsWriter,
) -> None:
    """An executor yields (task, record) for a task it was handed, once, with that cell's record."""
    owner = registry.owner[("executor", name)]
    index = getattr(task, "index", None)
    if not isinstance(index, int) or index not in handed or not 0 <= index < len(cells):
        raise PluginError(owner, f"executor {name!r} yielded {task!r}, not one of the tasks it was handed")
    if not isinstance(record, Mapping) or record.get("id") != cells[index].id:
        raise PluginError(owner, f"executor {name!r} yielded a record that is not the one of {cells[index].id}")
    if writer.has(cells[index].id):
        raise PluginError(owner, f"executor {name!r} yielded {cells[index].id} twice")


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
    """Run a plan's cells (:func:`ampsuite.host.session.plan`); returns (results document, interrupted)."""
    config.plugins = p.settings
    return run_cells(p.spec, p.cells, p.registry, p.device, config, observer)
