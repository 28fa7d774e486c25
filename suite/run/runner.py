"""Isolation: one worker process per cell (N with ``[measure] processes``), a timeout, exactly one record per cell.

The parent never measures anything itself: it starts a worker, waits for its
result or its death, classifies the outcome (:mod:`ampsuite.run.attempt`), writes
the record atomically and moves on. A worker runs in its own process group, so
a timed-out or interrupted cell is killed together with its DataLoader workers.
This module holds the loop over the cells; the results document is ampsuite.results'.

Where a cell's :func:`run_record` happens is the executor's choice (a plugin
record, :class:`ampsuite.Executor`): ``local`` calls each :class:`Task` here, one
after another; ``slurm`` submits them as jobs. Whatever the executor, this
module writes every record into the one results file the moment the executor
yields it, records skipped cells, keeps finished ones under ``--resume``, and
ends an interrupted run the same way.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, Protocol

from ampsuite import results
from ampsuite.contract.cell import Cell
from ampsuite.contract.errors import AmpsuiteError, PluginError
from ampsuite.contract.plugin import ExecutorContext
from ampsuite.contract.wire import Status
from ampsuite.host import executors
from ampsuite.host.manager import PluginSettings, Registry
from ampsuite.host.session import Plan
from ampsuite.results import base_record, now, open_results
from ampsuite.run import handoff
from ampsuite.run.attempt import CellJob
from ampsuite.run.devicepeaks import measure_peaks as _measure_peaks
from ampsuite.run.forkserver import worker_context
from ampsuite.run.pool import most_processes, pool_outcomes, process_count
from ampsuite.run.signals import interrupts
from ampsuite.run.task import Task, run_record
from ampsuite.spec.suitespec import SuiteSpec

__all__ = [
    "CellJob",
    "Observer",
    "RunConfig",
    "Task",
    "pool_outcomes",
    "process_count",
    "run_cells",
    "run_plan",
    "run_record",
]


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
    retry_failed: bool = False
    """With ``resume``: cells whose record ended failed, oom, timeout or crashed run again."""
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


NOT_STARTED = "not started: the run was interrupted before this cell"
NOT_FINISHED = "not finished: the run was interrupted while the executor had this cell"


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
    """Run every cell through the run's executor and write its record; returns (document, interrupted).

    Records are written as the executor yields them, so a killed run keeps what
    it finished; ``config.resume`` skips cells that already have a terminal
    record. Ctrl-C, SIGTERM or SIGHUP (:mod:`ampsuite.run.signals`), wherever it
    lands (the fork server's start, peaks, a cell, between cells), ends the run
    the same way: the executor is closed (a batch executor cancels its jobs), the
    running cell and every cell without a record are recorded as ``interrupted``,
    and the document is returned as usual, so the caller still prints its summary.
    """
    chosen = executors.resolve(spec, registry.executors, config.executor, config.executor_options)
    if chosen.executor.check is not None:
        reason = chosen.executor.check(chosen.options)
        if reason:
            raise PluginError(registry.owner[("executor", chosen.executor.name)], reason)
    writer = open_results(spec, config, device, registry, {c.id for c in cells}, cells, observer.message)
    kept = {r["id"]: r for r in writer.doc["cells"]}
    local = chosen.executor.name == executors.DEFAULT
    ctx: BaseContext | None = None
    timeout = spec.timeout if config.timeout is None else config.timeout
    interrupted = False
    failure: AmpsuiteError | None = None
    handed: set[int] = set()
    logdir = Path(tempfile.mkdtemp(prefix="ampsuite-logs-"))
    with contextlib.ExitStack() as stack:
        # Run in reverse: the records are put in order and the run's end written
        # while the run's signal policy still holds, then the handlers are restored.
        stack.callback(shutil.rmtree, logdir, ignore_errors=True)
        policy = stack.enter_context(interrupts())
        stack.callback(_finish, writer, [c.id for c in cells])
        memory = handoff.ExecutorMemory(writer, chosen.executor.name, {c.id for c in cells}, observer.message)
        stack.callback(memory.prune)  # before _finish writes the run's end

        def interrupt() -> None:
            nonlocal interrupted
            interrupted = True
            policy.interrupted()

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

        step = "starting the workers' fork server"
        try:
            observer.run_started(len(cells), config.output)
            ctx = None if config.in_process else worker_context(registry)
            if config.measure_peaks and writer.doc["environment"].get("peaks") is None and ctx is not None and local:
                step = "measuring the device's peaks"
                writer.doc["environment"]["peaks"] = _measure_peaks(
                    ctx, device, config.refresh_peaks, logdir / "peaks.log", observer.message
                )
                writer.flush()
        except KeyboardInterrupt:
            interrupt()
            observer.message(f"interrupted before the first cell (while {step})")
        except AmpsuiteError as exc:  # a built-in the fork server cannot import: recorded below, then raised
            failure = exc
            interrupt()
        if not interrupted:
            seconds = timeout * most_processes(spec)
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
                while (item := handoff.next_yield(produced, registry, chosen.executor.name)) is not None:
                    task, record = item
                    handoff.check_yield(registry, chosen.executor.name, task, record, cells, handed, writer)
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
                handoff.close(produced)
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


def _finish(writer: results.ResultsWriter, ids: list[str]) -> None:
    writer.order(ids)
    writer.doc["run"]["finished"] = now()
    writer.flush()


def _notify(registry: Registry, record: dict[str, Any]) -> list[str]:
    errors = []
    for impl in registry.hook.ampsuite_cell_finished.get_hookimpls():
        try:
            impl.function(record=record)
        except (Exception, SystemExit) as exc:  # an observer must not stop the run
            errors.append(
                f"warning: plugin {impl.plugin_name!r} ampsuite_cell_finished raised {type(exc).__name__}: {exc}"
            )
    return errors


def run_plan(p: Plan, config: RunConfig, observer: Observer) -> tuple[dict[str, Any], bool]:
    """Run a plan's cells (:func:`ampsuite.host.session.plan`); returns (results document, interrupted)."""
    config.plugins = p.settings
    return run_cells(p.spec, p.cells, p.registry, p.device, config, observer)
