"""Max-batch search: the largest batch size that runs, per workload configuration and combination.

Mixed precision halves activation memory; the batch size it lets a model reach
is as much a result as its speed. For every selected (workload configuration,
combination) pair the search

1. doubles the batch size from the start (by default the smallest batch size
   the suite gives that workload) until an attempt does not run or the limit is
   reached; when the start itself does not run, it halves instead, down to 1;
2. bisects between the largest batch that ran and the smallest that did not,
   until the gap is at most ``max(QUANTUM, fit // RESOLUTION)``: the answer is
   within 1/16 of itself or 8 samples, and from 8 on every batch tried is a
   multiple of 8 (Tensor Core kernels want them);
3. measures the largest batch that ran once more with the suite's own
   ``[measure]``: that record, ``WORKLOAD/COMBINATION/max-batch``, is the
   summary; its ``metrics["throughput"]`` is the throughput at the maximum and
   its ``metrics["max_batch"]`` holds the search (every attempt, what bounded it).

Each attempt is a cell of its own, ``WORKLOAD/COMBINATION/search-bsN``, run
in a fresh worker by the runner exactly as ``ampsuite run`` runs a cell (so an
out-of-memory attempt leaves nothing behind for the next), with a short
measure (``attempt_measure``); its record is written atomically before the
next attempt starts, with status ``passed`` or ``oom`` (or whatever else ended
it). Any attempt that does not pass bounds the search from above; when that
was not an out-of-memory error, the summary says so in a warning.

Skip reasons are those of the suite's own cells (a technique whose ``check``
depends on the batch size is checked at the suite's sizes, not at each attempt's).
On a CPU the search needs ``suite.memory_limit_gb``: the worker's address-space
limit turns exhaustion into an error the attempt can report, where the host's
OOM killer would take the machine's memory first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from ampsuite import results
from ampsuite.contract.cell import Cell
from ampsuite.contract.errors import UsageError
from ampsuite.contract.wire import Status
from ampsuite.host.manager import PluginSettings, Registry
from ampsuite.host.session import Plan
from ampsuite.results import base_record, now, open_results
from ampsuite.run.forkserver import worker_context
from ampsuite.run.runner import CellJob, RunConfig, run_record
from ampsuite.run.signals import interrupts
from ampsuite.spec.suitespec import MeasureSpec, SuiteSpec

__all__ = ["QUANTUM", "RESOLUTION", "SearchConfig", "attempt_measure", "midpoint", "search"]

QUANTUM = 8
"""From this size on, every batch tried is a multiple of it."""
RESOLUTION = 16
"""Bisection stops when the gap between ran and did-not-run is at most 1/RESOLUTION of what ran (or QUANTUM)."""


@dataclass
class SearchConfig:
    """How to search (what ``ampsuite max-batch`` was given)."""

    output: Path = field(metadata={"help": "the results file (never overwritten: an old one is renamed)"})
    start: int | None = field(default=None, metadata={"help": "first batch size (default: the suite's smallest)"})
    limit: int = field(default=65536, metadata={"help": "largest batch size to try"})
    plugins: PluginSettings = field(default_factory=PluginSettings, metadata={"help": "plugins the workers load"})
    data_dir: Path = field(default=Path("reports/data"), metadata={"help": "where generated data sets live"})
    timeout: float | None = field(default=None, metadata={"help": "seconds per attempt (default suite.timeout)"})
    argv: Sequence[str] = field(default=(), metadata={"help": "the command line, for the results file"})

    def __post_init__(self) -> None:
        if self.start is not None and (isinstance(self.start, bool) or self.start < 1):
            raise ValueError(f"start must be an integer >= 1, got {self.start!r}")
        if isinstance(self.limit, bool) or self.limit < 1:
            raise ValueError(f"limit must be an integer >= 1, got {self.limit!r}")
        if self.start is not None and self.start > self.limit:
            raise ValueError(f"start ({self.start}) must not exceed limit ({self.limit})")
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout must be > 0, got {self.timeout!r}")


def attempt_measure(measure: MeasureSpec) -> MeasureSpec:
    """A short measure for attempts: enough steps to reach the step's peak memory and a rough throughput."""
    return MeasureSpec(
        warmup_steps=min(measure.warmup_steps, 2),
        min_steps=3,
        max_steps=5,
        max_seconds=min(measure.max_seconds, 2.0),
        noise_target=measure.noise_target,
        numerics_steps=1,
        processes=1,  # an attempt asks whether the batch runs; the summary's measure has the suite's processes
    )


def midpoint(ran: int, failed: int) -> int | None:
    """The next batch size to try between one that ran and a larger one that did not; None when close enough."""
    if failed - ran <= max(QUANTUM, ran // RESOLUTION):
        return None
    mid = (ran + failed) // 2
    if mid >= QUANTUM:
        # The gap is over QUANTUM, so a multiple of it lies strictly between: below mid, or just above ran.
        mid -= mid % QUANTUM
        if mid <= ran:
            mid += QUANTUM
    return mid if ran < mid < failed else None


Report = Callable[[dict[str, Any]], None]


class _Search:
    """The state shared by the attempts of one search run (worker context, writer, logs)."""

    def __init__(self, plan: Plan, config: SearchConfig, report: Report) -> None:
        self.plan = plan
        self.config = config
        self.report = report
        self.run_config = RunConfig(
            output=config.output,
            plugins=config.plugins,
            data_dir=config.data_dir,
            measure_peaks=False,
            argv=config.argv,
        )
        self.ctx: BaseContext = worker_context(plan.registry)
        self.timeout = config.timeout or plan.spec.timeout
        # An attempt asks whether a batch fits, not how it trains: no quality run.
        self.attempt_spec = dataclasses.replace(plan.spec, measure=attempt_measure(plan.spec.measure), quality=None)
        self.logdir = Path(tempfile.mkdtemp(prefix="ampsuite-maxbatch-"))
        self.writer = open_results(plan.spec, self.run_config, plan.device, plan.registry, set())
        self.writer.doc["run"]["max_batch"] = {
            "start": config.start,
            "limit": config.limit,
            "quantum": QUANTUM,
            "resolution": RESOLUTION,
            "attempt_measure": dataclasses.asdict(self.attempt_spec.measure),
        }
        self.writer.flush()
        self.count = 0

    def run(self, cell: Cell, spec: SuiteSpec, *, report: bool = True) -> dict[str, Any]:
        """One cell in a fresh worker, exactly as ``ampsuite run`` runs it; its record is written before this returns.

        :raises KeyboardInterrupt: after writing the record, when the attempt was interrupted.
        """
        registry: Registry = self.plan.registry
        self.count += 1
        log = self.logdir / f"attempt-{self.count}.log"
        record = run_record(CellJob(self.ctx, spec, cell, self.run_config, log, self.timeout, registry))
        self.writer.add(record)
        if record["status"] == Status.INTERRUPTED:
            raise KeyboardInterrupt(record["id"])
        if report:
            self.report(record)
        return record


def _message(record: dict[str, Any]) -> str:
    ev = record.get("evidence") or {}
    text = ev.get("message") or ev.get("reason") or ev.get("signal") or ev.get("timeout_seconds") or ""
    return f"{record['status']}" + (f": {text}" if text else "")


def _search_one(s: _Search, key: str, cell: Cell, start: int) -> dict[str, Any]:
    """Search one (workload configuration, combination); returns its summary record."""
    limit = s.config.limit
    start = min(start, limit)
    attempts: dict[int, dict[str, Any]] = {}

    def ran(bs: int) -> bool:
        attempt = dataclasses.replace(cell, id=f"{key}/search-bs{bs}", batch_size=bs, skip_reason=None)
        attempts[bs] = s.run(attempt, s.attempt_spec)
        return bool(attempts[bs]["status"] == Status.PASSED)

    fit, failed = 0, None
    if ran(start):
        fit = start
        while fit < limit:
            bs = min(fit * 2, limit)
            if not ran(bs):
                failed = bs
                break
            fit = bs
    else:
        failed = start
        while failed > 1:
            bs = failed // 2
            if ran(bs):
                fit = bs
                break
            failed = bs
    while fit and failed is not None:
        mid = midpoint(fit, failed)
        if mid is None:
            break
        if ran(mid):
            fit = mid
        else:
            failed = mid

    bound = attempts.get(failed) if failed is not None else None
    facts: dict[str, Any] = {
        "largest": fit or None,
        "first_failure": failed,
        "bounded_by": None if bound is None else {"id": bound["id"], "status": bound["status"], "why": _message(bound)},
        "reached_limit": fit == limit,
        "resolution": max(QUANTUM, fit // RESOLUTION) if fit else None,
        "start": start,
        "limit": limit,
        "attempts": [{"batch_size": bs, "status": r["status"]} for bs, r in attempts.items()],
    }
    warnings = []
    if bound is not None and bound["status"] != Status.OOM:
        warnings.append(f"the search was bounded by {bound['id']} ending {_message(bound)}, not by memory")
    if fit:
        confirm = dataclasses.replace(cell, id=f"{key}/max-batch", batch_size=fit, skip_reason=None)
        summary = s.run(confirm, s.plan.spec, report=False)
        if summary["status"] != Status.PASSED:
            warnings.append(f"batch {fit} ran in the search but ended {summary['status']} when measured again")
    else:
        assert bound is not None
        summary = base_record(
            dataclasses.replace(cell, id=f"{key}/max-batch", batch_size=bound["batch_size"]), s.plan.registry
        )
        summary.update(
            status=bound["status"] if bound["status"] in results.TERMINAL else Status.FAILED,
            evidence={"reason": f"no batch size ran: {bound['id']} ended {_message(bound)}", "attempt": bound["id"]},
        )
    summary["metrics"] = {**summary.get("metrics", {}), "max_batch": facts}
    summary["warnings"] = [*summary.get("warnings", []), *warnings]
    s.writer.add(summary)
    s.report(summary)
    return summary


def _groups(cells: Sequence[Cell]) -> dict[str, list[Cell]]:
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.id.rsplit("/", 1)[0], []).append(cell)
    return groups


def search(plan: Plan, config: SearchConfig, report: Report = lambda record: None) -> list[dict[str, Any]]:
    """Search every (workload configuration, combination) of the plan's cells; returns the summary records.

    :param report: called with each record as it is written (attempts and summaries).
    :raises UsageError: on a CPU without ``suite.memory_limit_gb``.
    """
    spec = plan.spec
    if plan.device == "cpu" and spec.memory_limit_gb <= 0:
        raise UsageError(
            f"{spec.path}: max-batch on a CPU needs suite.memory_limit_gb, so that running out of memory "
            "ends an attempt in its worker instead of calling the host's OOM killer"
        )
    s = _Search(plan, config, report)
    try:
        with interrupts():
            return _search_all(s, plan, config, report)
    finally:
        s.writer.doc["run"]["finished"] = now()
        s.writer.flush()
        with contextlib.suppress(OSError):
            for log in s.logdir.iterdir():
                log.unlink()
            s.logdir.rmdir()


def _search_all(s: _Search, plan: Plan, config: SearchConfig, report: Report) -> list[dict[str, Any]]:
    summaries = []
    for key, cells in _groups(plan.cells).items():
        runnable = [c for c in cells if not c.skip_reason]
        if not runnable:
            record = base_record(dataclasses.replace(cells[0], id=f"{key}/max-batch"), plan.registry)
            record.update(status=Status.SKIPPED, evidence={"reason": cells[0].skip_reason})
            s.writer.add(record)
            report(record)
            summaries.append(record)
            continue
        start = config.start or min(c.batch_size for c in runnable)
        summaries.append(_search_one(s, key, runnable[0], start))
    return summaries
