"""One worker attempt at a cell: start it, wait for its result or its end, and say what happened.

The parent never measures anything itself. It starts a worker in its own
process group, waits for one result, and turns whatever ends the attempt into
an :class:`~ampsuite.contract.wire.Outcome`: the worker's checked result, a
timeout (with the worker's thread stacks at that moment), or a crash (with
its exit code or signal and the end of its log).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampsuite.contract.cell import Cell
from ampsuite.contract.wire import Outcome, Status, WorkerPayload, outcome
from ampsuite.host.manager import Registry
from ampsuite.run import procs
from ampsuite.run.resultcheck import malformed, refused
from ampsuite.spec.names import path_component
from ampsuite.spec.suitespec import SuiteSpec

if TYPE_CHECKING:
    from ampsuite.run.runner import RunConfig

__all__ = [
    "KILL_GRACE_SECONDS",
    "CellJob",
    "WorkerInterrupted",
    "checked",
    "ended",
    "in_worker",
    "interrupted_outcome",
    "kill_group",
    "measure_once",
    "payload",
    "stacks",
]

ARTIFACTS = "artifacts"
"""The folder beside a results file that holds its cells' artifacts, one subfolder per cell."""
KILL_GRACE_SECONDS = 5.0
STACKS_WAIT_SECONDS = 1.0
"""How long a timed-out worker gets to write its stacks before its group is killed."""
STACKS_BYTES = 32000


@dataclass(frozen=True)
class CellJob:
    """How to measure one cell: everything an attempt needs, passed as one value.

    Attributes:
        ctx: the multiprocessing context workers start from; None measures in this process.
        spec: the suite (measurement settings, seed, limits).
        cell: the cell.
        config: the run's settings (plugins, data folder).
        log: the file the worker's output goes to (kept as evidence).
        timeout: seconds one worker may take.
        registry: the parent's plugins (used in this process; workers load their own).
    """

    ctx: BaseContext | None
    spec: SuiteSpec
    cell: Cell
    config: RunConfig
    log: Path
    timeout: float
    registry: Registry
    seed_offset: int = 0
    """Added to the suite's seed: a quality suite trains process i of a cell from seed + i."""

    def with_log(self, log: Path) -> CellJob:
        return dataclasses.replace(self, log=log)


def payload(job: CellJob) -> WorkerPayload:
    """What the worker of ``job`` starts from (plain data)."""
    out = _payload(job)
    quality = job.spec.quality
    if quality is not None and job.cell.world_size <= 1:  # data-parallel cells are timed only (docs/quality.md)
        out["quality"] = quality.plan(job.cell.workload_id)
    return out


def _payload(job: CellJob) -> WorkerPayload:
    return {
        "cell": job.cell.as_dict(),
        "measure": asdict(job.spec.measure),  # type: ignore[typeddict-item]
        "seed": job.spec.seed + job.seed_offset,
        "data_dir": str(job.config.data_dir),
        "plugins": job.config.plugins.as_dict(),
        "log_path": str(job.log),
        "memory_limit_bytes": int(job.spec.memory_limit_gb * 2**30),
        "cpu_threads": job.spec.cpu_threads,
        "artifact_dir": str(job.config.output.parent.resolve() / ARTIFACTS / path_component(job.cell.id)),
        "artifact_prefix": f"{ARTIFACTS}/{path_component(job.cell.id)}",
    }


def kill_group(proc: Any) -> None:
    """End the worker ``proc``, every process below it (whatever its session: the worker is their subreaper) and
    whatever is left of its process group (the children of a worker that died)."""
    if proc.pid is not None and proc.is_alive():  # its tree only while it lives: a reaped pid may be reused
        procs.kill_tree(proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.kill()
    proc.join(KILL_GRACE_SECONDS)


class WorkerInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) while a worker ran: the worker is gone, and ``stacks`` says where it was.

    A KeyboardInterrupt still, so every caller that stops on Ctrl-C stops on it. The stacks let the record of a cell
    interrupted before its first step say whether it was compiling or waiting on the GPU.
    """

    def __init__(self, stacks: str) -> None:
        super().__init__("interrupted while running")
        self.stacks = stacks


def stacks(proc: Any, log: Path) -> str:
    """Ask a stuck worker for every thread's Python stack (faulthandler, :data:`procs.STACKS_SIGNAL`)."""
    start = procs.log_size(log)
    try:
        os.kill(proc.pid, procs.STACKS_SIGNAL)  # the worker alone: its ranks or loaders would die of it
    except (ProcessLookupError, PermissionError):
        return ""
    deadline = time.monotonic() + STACKS_WAIT_SECONDS
    seen = start
    while time.monotonic() < deadline:
        time.sleep(0.1)
        size = procs.log_size(log)
        if start < size == seen:  # written, and nothing more for a moment: the dump is complete
            break
        seen = size
    return procs.log_since(log, start, STACKS_BYTES)


def in_worker(
    ctx: BaseContext, target: Callable[..., None], args: tuple[Any, ...], timeout: float, log: Path
) -> tuple[str, Any]:
    """Run ``target(*args, conn)`` in a fresh process.

    :return: ("result", value) | ("timed out", stacks) | ("died", exitcode) | ("unreadable", exitcode)
    """
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(*args, sender), daemon=False)  # type: ignore[attr-defined]
    proc.start()
    sender.close()
    try:
        if receiver.poll(timeout):
            try:
                value = receiver.recv()
            except EOFError:
                proc.join(KILL_GRACE_SECONDS)
                return "died", proc.exitcode
            except Exception:  # sent, but it cannot be read back (its data went with the worker)
                proc.join(KILL_GRACE_SECONDS)
                return "unreadable", proc.exitcode
            proc.join(KILL_GRACE_SECONDS)
            return "result", value
        dump = stacks(proc, log)
        kill_group(proc)
        return "timed out", dump
    except KeyboardInterrupt as exc:
        try:
            dump = stacks(proc, log)
        finally:  # a second Ctrl-C during the dump still takes the worker down
            kill_group(proc)
        raise WorkerInterrupted(dump) from exc
    finally:
        kill_group(proc)  # however the attempt ended, nothing it started outlives it
        receiver.close()


def checked(result: Any, log: Path) -> Outcome:
    """The worker's result when it can become a record, else the ``failed`` MalformedResult outcome."""
    problem = malformed(result)
    if problem is None:
        return dict(result)  # type: ignore[return-value]
    return refused(problem, procs.log_tail(log))


def ended(exitcode: int | None) -> str:
    """How a process with ``exitcode`` ended, as evidence words it ("was killed by SIGKILL")."""
    name = procs.signal_name(exitcode)
    if name is not None:
        return f"was killed by {name}"
    return "ended" if exitcode is None else f"exited with code {exitcode}"


def measure_once(job: CellJob) -> Outcome:
    """One process's measurement of the cell (a fresh worker, or this process when ``job.ctx`` is None)."""
    from ampsuite.run import worker

    data = payload(job)
    if job.ctx is None:
        state: dict[str, Any] = {}
        try:
            return checked(worker.run_cell(dict(data), state, job.registry), job.log)
        except (Exception, SystemExit) as exc:  # a plugin's sys.exit() is its cell's failure, as in a worker
            return worker.classify(exc, state)
    kind, value = in_worker(job.ctx, worker.main, (data,), job.timeout, job.log)
    if kind == "result":
        return checked(value, job.log)
    tail = procs.log_tail(job.log)
    if kind == "timed out":
        return outcome(Status.TIMEOUT, {"timeout_seconds": job.timeout, "stderr_tail": tail, "stacks": value})
    what = "before sending a result" if kind == "died" else "after sending a result that could not be read"
    return outcome(
        Status.CRASHED,
        {
            "message": f"worker {ended(value)} {what}",
            "exitcode": value,
            "signal": procs.signal_name(value),
            "stderr_tail": tail,
        },
    )


def interrupted_outcome(log: Path, interrupt: KeyboardInterrupt | None = None) -> Outcome:
    """The outcome of a cell whose worker was stopped by Ctrl-C (or SIGTERM), with its stacks when it had any."""
    evidence = {"reason": "interrupted while running", "stderr_tail": procs.log_tail(log)}
    if isinstance(interrupt, WorkerInterrupted) and interrupt.stacks:
        evidence["stacks"] = interrupt.stacks
    return outcome(Status.INTERRUPTED, evidence)
