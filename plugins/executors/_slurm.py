"""The slurm executor's submitit half: submit the cells as job arrays, yield each record as its job ends.

Each job calls its :class:`suite.CellTask`, which runs the cell through the
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import submitit

from suite import CellTask, ExecutorContext, Status

STDERR_TAIL_CHARS = 4000
MULTI_NODE = "{world} processes per node > gpus_per_node {gpus}: declare nodes = M for a cell across nodes"
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
        local = self.cluster in ("local", "debug")
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
    one_host = options.cluster in ("local", "debug")  # submitit runs these on this host: tasks stand in for nodes
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
    one_host = options.cluster in ("local", "debug")
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
            if not one_host:
                with executor.batch():
                    submitted = [executor.submit(NodeCall(t, options.cluster) if nodes > 1 else t) for t in group]
                pending.update(zip(submitted, group, strict=True))
            else:
                queue += [(executor, nodes, t) for t in group]
        running: set[Any] = set()
        while pending or queue:
            while queue and len(pending) < limit:
                executor, nodes, task = queue.pop(0)
                pending[executor.submit(NodeCall(task, options.cluster) if nodes > 1 else task)] = task
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


def _cancel(job: Any, cluster: str) -> None:
    if cluster == "local":
        # submitit cancels a local job with SIGINT, and its controller dies printing a traceback to the
        # terminal; SIGTERM is forwarded to the job's process, whose cell ends as on a cluster's scancel.
        os.kill(int(job.job_id), signal.SIGTERM)
    else:
        job.cancel(check=False)
