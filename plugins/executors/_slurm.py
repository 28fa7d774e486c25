"""The slurm executor's submitit half: submit the cells as job arrays, yield each record as its job ends.

Each job calls its :class:`ampsuite.CellTask`, which runs the cell through the
same isolated path as a local run (a fresh worker process on the node, with
the suite's timeout), so a cell is still alone in its process. Cells that
need the same resources (GPU count, node constraint) share one array. A job
that ends without a record (killed, timed out, preempted, out of memory, or
failed outside the cell) gets one here, with the scheduler's evidence: job id,
state, and the end of its stderr.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import submitit

from ampsuite import CellTask, ExecutorContext, Status

STDERR_TAIL_CHARS = 4000
MULTI_NODE = "{world} processes per node > gpus_per_node {gpus}: declare nodes = M for a cell across nodes"
ONE_HOST = ("local", "debug")
"""submitit's clusters that run every job on this host."""
PORTS = (20000, 60000)
"""Where a multi-node cell's rendezvous port is drawn from, by its job id (as submitit's own torch helper does)."""

_STATES: dict[str, Status] = {
    "TIMEOUT": Status.TIMEOUT,
    "DEADLINE": Status.TIMEOUT,
    "OUT_OF_MEMORY": Status.OOM,
    "PREEMPTED": Status.INTERRUPTED,
    "CANCELLED": Status.INTERRUPTED,
    "REQUEUED": Status.INTERRUPTED,
}
"""Scheduler states with a status of their own; any other end without a record (FAILED, NODE_FAIL, a local
job killed by a signal, ...) is ``crashed``. Preempted and cancelled cells are ``interrupted``: ``--resume``
runs them again."""


def status_of(state: str) -> Status:
    """The ampsuite status of a job that ended in scheduler state ``state`` without a record."""
    word = state.split()[0].upper() if state.split() else ""  # sacct writes "CANCELLED by 1234"
    return _STATES.get(word, Status.CRASHED)


def _one_line(text: object, limit: int = 500) -> str:
    return " ".join(str(text).split())[:limit]


def _state(job: Any) -> str:
    try:
        return str(job.state)
    except Exception as exc:  # a scheduler that cannot be asked is evidence too
        return f"UNKNOWN ({type(exc).__name__})"


def _stderr_tail(job: Any) -> str:
    try:
        text = job.stderr() or ""
    except Exception:
        return ""
    return text[-STDERR_TAIL_CHARS:]


def _record(task: CellTask, job: Any, cluster: str) -> dict[str, Any]:
    """The record of ``task`` whose job ``job`` is done: the cell's own, or one with the scheduler's evidence."""
    state = _state(job)
    evidence: dict[str, Any] = {"executor": "slurm", "cluster": cluster, "job_id": str(job.job_id), "state": state}
    try:
        record = _node_results(task, job) if task.cell.nodes > 1 else job.result()
    except Exception as exc:
        evidence["message"] = _one_line(exc)
        evidence["reason"] = f"job {job.job_id} ended without a record (scheduler state {state})"
        evidence["stderr_tail"] = _stderr_tail(job)
        return task.record(status_of(state), evidence)
    if not isinstance(record, dict) or record.get("id") != task.cell.id:
        evidence["reason"] = f"job {job.job_id} returned something that is not the record of {task.cell.id}"
        evidence["stderr_tail"] = _stderr_tail(job)
        return task.record(Status.CRASHED, evidence)
    if record.get("status") == Status.INTERRUPTED and status_of(state) != Status.CRASHED:
        # The scheduler stopped the cell (SIGTERM at a time limit or a preemption): its state says why.
        evidence["reason"] = f"job {job.job_id} was stopped by the scheduler (state {state})"
        evidence["cell_evidence"] = record.get("evidence")
        evidence["stderr_tail"] = _stderr_tail(job)
        return task.record(status_of(state), evidence)
    return record


class NodeCall:
    """What each task of a multi-node cell's job runs: one node, its rank and the rendezvous read from the job.

    On a Slurm cluster the job has ``nodes = M`` and one task per node; on submitit's local
    cluster (one host) its M tasks stand in for the nodes, each with its share of the GPUs.
    Node 0's host holds the rendezvous store, on a port drawn from the job id, so every task
    computes the same endpoint without talking to the others first.
    """

    def __init__(self, task: CellTask, cluster: str) -> None:
        self.task, self.cluster = task, cluster

    def __call__(self) -> dict[str, Any]:
        env = submitit.JobEnvironment()
        local = self.cluster in ONE_HOST
        host = "127.0.0.1" if local else str(env.hostnames[0])
        port = random.Random(str(env.job_id)).randint(*PORTS)
        return self.task.node(
            node_rank=int(env.global_rank),
            nnodes=int(env.num_tasks),
            endpoint=f"{host}:{port}",
            run_id=f"ampsuite-{env.job_id}",
            local_addr="127.0.0.1" if local else None,
            share_gpus=local,
        )


def _node_results(task: CellTask, job: Any) -> dict[str, Any]:
    """The cell's record from its nodes' results: a failure's when a node failed, else rank 0's node's."""
    records = [r for r in job.results() if isinstance(r, dict) and r.get("id") == task.cell.id]
    failed = [r for r in records if r.get("status") != Status.PASSED]
    if failed:
        return failed[0]
    if len(records) != 1:
        raise RuntimeError(f"{len(records)} of the job's nodes returned the cell's record; exactly one must")
    return records[0]


def _minutes(options: Any, ctx: ExecutorContext) -> int:
    return int(options.time_limit or math.ceil(ctx.cell_seconds / 60) + 10)


def _gpus(options: Any, ctx: ExecutorContext, task: CellTask) -> int:
    """GPUs per node: the option, else the cell's processes per node."""
    if ctx.device != "cuda":
        return 0
    return int(options.gpus_per_node or task.cell.world_size // max(1, task.cell.nodes))


def _constraint(options: Any, task: CellTask) -> str:
    """The node constraint of a cell: ``cell.extra["slurm"]["constraint"]`` when a plugin set one, else the option."""
    extra = task.cell.extra.get("slurm")
    if isinstance(extra, dict) and isinstance(extra.get("constraint"), str):
        return str(extra["constraint"])
    return str(options.constraint)


def _executor(options: Any, minutes: int, gpus: int, constraint: str, nodes: int = 1) -> Any:
    executor = submitit.AutoExecutor(folder=options.folder, cluster=options.cluster)
    one_host = options.cluster in ONE_HOST  # tasks stand in for nodes
    params: dict[str, Any] = {
        "name": "ampsuite",
        "timeout_min": minutes,
        "nodes": 1 if one_host else nodes,
        "tasks_per_node": nodes if one_host else 1,
        "gpus_per_node": (gpus * nodes if one_host else gpus) or None,  # None: no --gpus-per-node=0 in sbatch
        "cpus_per_task": options.cpus_per_task or None,
    }
    slurm = {
        "slurm_partition": options.partition,
        "slurm_constraint": constraint,
        "slurm_account": options.account,
        "slurm_array_parallelism": options.array_parallelism,
        "slurm_setup": list(options.setup),
    }
    params.update({k: v for k, v in slurm.items() if v})
    if options.cluster == "local" and options.setup:
        params["local_setup"] = list(options.setup)
    executor.update_parameters(**params)
    return executor


def _remember(ctx: ExecutorContext, task: CellTask, job: Any, cluster: str, nodes: int) -> None:
    """Keep the job in the results file (``run.executor.jobs``): a parent killed from now on leaves a job
    that ``--resume`` reattaches to instead of submitting the cell again."""
    data: dict[str, Any] = {
        "job_id": str(job.job_id),
        "folder": str(job.paths.folder),
        "cluster": cluster,
        "tasks": int(job.num_tasks),
    }
    if nodes > 1:
        data["nodes"] = nodes
    ctx.remember(task, data)


CONTROLLER = "submitit.local._local"
"""What the command line of a job controller of submitit's local cluster holds."""


def _proc_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Orphan:
    """A job of submitit's local cluster that an earlier parent started, and was killed since.

    The job is its controller's process (pid = job id), no longer a child of this one, so
    submitit's :class:`submitit.LocalJob` without its process handle would call it done at
    once. This one asks ``/proc`` instead: the job runs while its pid is alive and is a
    submitit controller (a pid that was reused by anything else is not the job), and it has
    its record when its tasks' result files exist; a controller that is gone without them
    ended without a result (killed with its old parent's session, or by a reboot).
    """

    def __init__(self, folder: str, job_id: str, tasks: int) -> None:
        self.job: submitit.LocalJob[Any] = submitit.LocalJob(folder=folder, job_id=job_id, tasks=tuple(range(tasks)))
        self.job_id = job_id

    def has_results(self) -> bool:
        return all(self.job.task(i).paths.result_pickle.exists() for i in range(self.job.num_tasks))

    def alive(self) -> bool:
        pid = int(self.job_id) if self.job_id.isdigit() else 0
        return pid > 0 and _proc_alive(pid) and CONTROLLER in _cmdline(pid)

    def done(self) -> bool:
        return self.has_results() or not self.alive()

    @property
    def state(self) -> str:
        if not self.has_results() and self.alive():
            return "RUNNING"
        return "FINISHED" if self.has_results() else "NO PROCESS AND NO RESULT"  # submitit's words

    def _check(self) -> None:
        if not self.has_results():
            raise RuntimeError(f"job {self.job_id} ended without a result (its controller is gone)")

    def result(self) -> Any:
        self._check()
        return self.job.result()

    def results(self) -> list[Any]:
        self._check()
        return list(self.job.results())

    def stderr(self) -> str | None:
        return self.job.stderr()

    def cancel(self) -> None:
        if self.alive():  # never a pid that is no longer the job's
            os.kill(int(self.job_id), signal.SIGTERM)


def reattach(data: Mapping[str, Any], cluster: str) -> Any | None:
    """The job an earlier, killed parent submitted (``data``, what :func:`_remember` kept), to collect its
    record, or None when it cannot be reattached (then the cell is submitted again)."""
    try:
        job_id, folder, tasks = str(data["job_id"]), str(data["folder"]), int(data.get("tasks", 1))
    except (KeyError, TypeError, ValueError):
        return None
    if data.get("cluster") != cluster or tasks < 1 or not job_id:
        return None
    if cluster == "local":
        orphan = Orphan(folder, job_id, tasks)
        return orphan if orphan.has_results() or orphan.alive() else None
    if cluster == "slurm":
        job: submitit.SlurmJob[Any] = submitit.SlurmJob(folder=folder, job_id=job_id, tasks=tuple(range(tasks)))
        known = job.watcher.get_state(job_id, mode="force") != "UNKNOWN"  # sacct forgets old jobs
        return job if known or job.task(0).paths.result_pickle.exists() else None
    return None  # debug: its jobs ran inside the parent, nothing of them survives it


def run(ctx: ExecutorContext) -> Iterator[tuple[CellTask, dict[str, Any]]]:
    options = ctx.options
    groups: dict[tuple[str, int, int], list[CellTask]] = {}
    for task in ctx.tasks:
        gpus = _gpus(options, ctx, task)
        per_node = task.cell.world_size // max(1, task.cell.nodes)
        if options.gpus_per_node and ctx.device == "cuda" and per_node > options.gpus_per_node:
            reason = MULTI_NODE.format(world=per_node, gpus=options.gpus_per_node)
            yield task, task.record(Status.SKIPPED, {"reason": reason})
            continue
        groups.setdefault((_constraint(options, task), gpus, max(1, task.cell.nodes)), []).append(task)
    pending: dict[Any, CellTask] = {}
    # On a one-host cluster (submitit's local and debug) every job would start at once on the same
    # CPUs and GPUs, and cells measured side by side measure each other: one job at a time there,
    # unless array_parallelism says otherwise. A real cluster gets each array whole (its own limit).
    one_host = options.cluster in ONE_HOST
    limit = (options.array_parallelism or 1) if one_host else math.inf
    queue: list[tuple[Any, int, CellTask]] = []
    try:
        minutes = _minutes(options, ctx)
        for (constraint, gpus, nodes), group in groups.items():
            executor = _executor(options, minutes, gpus, constraint, nodes)
            where = (f" on {constraint}" if constraint else "") + (f", {nodes} nodes each" if nodes > 1 else "")
            ctx.message(
                f"slurm executor ({options.cluster}): {len(group)} cells{where}, {gpus} GPU(s) and {minutes} min "
                f"each{' (one job at a time on this host)' if one_host and limit == 1 else ''}; "
                f"files in {Path(options.folder).parent}"
            )
            fresh = []
            for task in group:
                job = _reattached(ctx, task)
                if job is not None:
                    pending[job] = task
                else:
                    fresh.append(task)
            if not fresh:
                continue
            if not one_host:
                with executor.batch():
                    submitted = [_submit(executor, t, nodes, options.cluster) for t in fresh]
                pending.update(zip(submitted, fresh, strict=True))
                for job, task in zip(submitted, fresh, strict=True):
                    _remember(ctx, task, job, options.cluster, nodes)
            else:
                queue += [(executor, nodes, t) for t in fresh]
        running: set[Any] = set()
        while pending or queue:
            while queue and len(pending) < limit:
                executor, nodes, task = queue.pop(0)
                job = _submit(executor, task, nodes, options.cluster)
                pending[job] = task
                _remember(ctx, task, job, options.cluster, nodes)
            for job in [j for j in pending if j.done()]:
                task = pending.pop(job)
                yield task, _record(task, job, options.cluster)
            for job, task in pending.items():  # the display names the cell whose job started last
                if job not in running and _state(job) == "RUNNING":
                    running.add(job)
                    ctx.started(task)
            if pending and not any(j.done() for j in pending):
                time.sleep(options.poll_seconds)
    finally:
        for job in pending:  # interrupted, or the runner stopped early: nothing of this run keeps running
            with contextlib.suppress(Exception):
                _cancel(job, options.cluster)


def _submit(executor: Any, task: CellTask, nodes: int, cluster: str) -> Any:
    """Submit ``task``: the cell itself, or for a multi-node cell what each of its job's tasks runs."""
    return executor.submit(NodeCall(task, cluster) if nodes > 1 else task)


def _reattached(ctx: ExecutorContext, task: CellTask) -> Any | None:
    """The job of ``task`` that a killed parent left running (or finished), when there is one to collect."""
    data = ctx.remembered(task)
    if not data:
        return None
    job = reattach(data, ctx.options.cluster)
    if job is None:
        ctx.message(f"slurm executor: job {data.get('job_id')} of {task.cell.id} is gone; submitting the cell again")
        return None
    ctx.message(f"slurm executor: reattached job {job.job_id} of {task.cell.id} ({_state(job)})")
    return job


def _cancel(job: Any, cluster: str) -> None:
    if isinstance(job, Orphan):
        job.cancel()
    elif cluster == "local":
        # submitit cancels a local job with SIGINT, and its controller dies printing a traceback to the
        # terminal; SIGTERM is forwarded to the job's process, whose cell ends as on a cluster's scancel.
        os.kill(int(job.job_id), signal.SIGTERM)
    else:
        job.cancel(check=False)
