"""One cell and its record: :func:`run_record` (the one code path from a cell to its record) and :class:`Task`,
the picklable cell an executor calls where the cell should run."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from ampsuite.contract.cell import Cell
from ampsuite.contract.plugin import NodePlace
from ampsuite.contract.wire import Outcome, Status
from ampsuite.host.manager import Registry, load_registry
from ampsuite.results import base_record
from ampsuite.run import attempt
from ampsuite.run.attempt import CellJob
from ampsuite.run.forkserver import worker_context
from ampsuite.run.pool import measure_processes
from ampsuite.run.signals import interrupts
from ampsuite.spec.suitespec import SuiteSpec

if TYPE_CHECKING:
    from ampsuite.run.runner import RunConfig

__all__ = ["Task", "run_record"]


def run_record(job: CellJob) -> dict[str, Any]:
    """Run ``job.cell`` (in a worker from ``job.ctx``, or in this process when None) and return its complete record.

    The one code path from a cell to its record, shared by ``ampsuite run`` and
    ``ampsuite max-batch``. With ``[measure] processes`` > 1 the cell runs in
    that many workers, one after another, each with ``job.timeout`` (see
    :func:`ampsuite.run.pool.pool_outcomes`). Ctrl-C (or SIGTERM, SIGHUP: :mod:`ampsuite.run.signals`)
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


@dataclass
class Task:
    """One cell handed to an executor (:class:`ampsuite.CellTask`): call it where the cell should run.

    In the parent it runs the cell with the run's worker context and plugins.
    Pickled (an executor sending it to another process or node), it leaves
    both behind, and the process that calls it loads the plugins again from
    ``config.plugins``, starts its own fork server (spawns workers instead in a
    fork of the process that started the run's) and keeps the worker's log
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
        parent; where an unpickled task is called, the plugins loaded again, a fork server of its own (spawn in a
        fork of the process that started the run's) and a temporary log folder, with a scheduler's SIGTERM
        (scancel, a time limit) ending the cell like Ctrl-C."""
        if self.here:
            assert self.registry is not None
            yield self.registry, self.ctx, self.log
            return
        with interrupts():
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

    def node(self, **where: Unpack[NodePlace]) -> dict[str, Any]:
        """Run one node of this multi-node cell here (a cluster job's task); see :meth:`ampsuite.CellTask.node`."""
        from ampsuite.run import nodes

        with self._place() as place:
            job = self._job(*place)
            record = base_record(self.cell, job.registry)
            t0 = time.perf_counter()
            try:
                result = nodes.measure_node(job, where)
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
