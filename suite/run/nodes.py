"""Multi-node cells on one machine: the built-in executor's stand-in for a cluster.

A cell with ``nodes = M`` (suite file) is run by M *node processes*, each
started like a worker (its own session and process group, dying with the
runner, writing into the cell's log) and each running
:func:`ampsuite.run.launcher.run_node` -- the same entry a cluster executor calls
once per host -- against a c10d rendezvous on 127.0.0.1. torch's own
rendezvous joins them; nothing here knows which node will hold which ranks.

The rendezvous port. Node 0 starts first with port 0: it binds the rendezvous
store on a port the kernel picks and sends the endpoint back; only then are
nodes 1..M-1 started with it. Choosing a free port here (bind port 0, read it,
close it, hand it on) would leave a moment in which another process -- a
second suite on this host -- could take the port before node 0 binds it again.

Ending. The runner waits for every node's result (node 0's endpoint message
counts against the same timeout). The cell's outcome:

* every node passed: the result of the node that held global rank 0 (the
  others send ``{"node_done": ...}``), with ``notes.distributed.node_processes``;
* a node process died without a result (killed, crashed): ``crashed``, with
  that node's exit code or signal, ``node`` and ``nodes`` (each node's pid and
  how it ended); the first node to die is the cause -- the others' ranks fail
  after it, in a collective that lost its peer, and are stopped at once;
* a node reported a failure (a rank raised or died; its evidence names the
  rank, as a one-node cell's does): the others get :data:`GRACE_SECONDS` to
  report theirs, and the cause is a rank that died without raising
  (``RankCrashed``) before one that raised, else the first report;
* the timeout: ``timeout``, with every still-running node's thread stacks.

Evidence of a failure adds ``nodes``: each node's label, pid, how it ended
(``result``, ``died``, ``stopped`` by the runner) and the ranks it started
(rank, pid: from the start line each rank writes into the cell's log).

In every case each node's process group (the node and its ranks) is killed
before the outcome is returned.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection
import os
import re
import signal
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from typing import Any

from ampsuite.contract.plugin import NodePlace
from ampsuite.contract.wire import Outcome, Status, outcome
from ampsuite.run import procs
from ampsuite.run.attempt import CellJob, checked, ended, kill_group, payload, stacks
from ampsuite.run.launcher import alive as launcher_alive

__all__ = ["GRACE_SECONDS", "LOCAL_HOST", "measure_node", "measure_nodes", "visible_devices"]

GRACE_SECONDS = 5.0
"""After one node reports a failure, how long the others get to report theirs before they are killed."""
LOCAL_HOST = "127.0.0.1"
LOG_SCAN_BYTES = 2**20
"""How much of the cell's log is read for the ranks' start lines (they come first)."""


@dataclass
class _Node:
    rank: int
    proc: Any
    conn: Any
    result: Any = None
    ending: str | None = None
    """None while running; "result", "died" or "stopped" (killed by the runner)."""
    exitcode: int | None = None
    at: float = field(default=0.0)

    def summary(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"node": self.rank, "pid": self.proc.pid, "ended": self.ending or "running"}
        if self.ending == "result" and isinstance(self.result, dict):
            entry["status"] = Status.PASSED if "node_done" in self.result else self.result.get("status")
        else:
            entry.update(exitcode=self.exitcode, signal=procs.signal_name(self.exitcode))
        return entry


def visible_devices(node_rank: int, per_node: int) -> str:
    """This node's share of the machine's GPUs, as ``CUDA_VISIBLE_DEVICES``: node k gets GPUs k*N .. k*N+N-1."""
    inherited = os.environ.get("CUDA_VISIBLE_DEVICES")
    pool = [d.strip() for d in inherited.split(",")] if inherited else None
    ids = range(node_rank * per_node, (node_rank + 1) * per_node)
    return ",".join(pool[i] if pool is not None and i < len(pool) else str(i) for i in ids)


def _start(ctx: BaseContext, data: dict[str, Any], node: dict[str, Any]) -> _Node:
    from ampsuite.run import worker

    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=worker.node_main, args=(data, node, sender), daemon=False)  # type: ignore[attr-defined]
    proc.start()
    sender.close()
    return _Node(int(node["node_rank"]), proc, receiver)


def _read(node: _Node) -> None:
    """Take what ``node`` sent (or learn that it ended without sending) and mark how it ended."""
    try:
        while node.conn.poll():
            value = node.conn.recv()
            if isinstance(value, tuple) and value[:1] == ("endpoint",):
                node.result = value  # only node 0 sends it, before its result
                continue
            node.result, node.ending, node.at = value, "result", time.monotonic()
            return
    except (EOFError, OSError):
        pass
    except Exception:  # sent, but unreadable: the node's data went with it
        pass
    if not node.proc.is_alive():
        node.proc.join(1)
        node.ending, node.exitcode, node.at = "died", node.proc.exitcode, time.monotonic()


def _bad(node: _Node) -> bool:
    if node.ending == "died":
        return True
    return node.ending == "result" and not (
        isinstance(node.result, dict) and ("node_done" in node.result or node.result.get("status") == Status.PASSED)
    )


def _wait(nodes: list[_Node], until: float) -> None:
    running = [n for n in nodes if n.ending is None]
    timeout = max(0.0, until - time.monotonic())
    handles = [n.conn for n in running] + [n.proc.sentinel for n in running]
    ready = set(multiprocessing.connection.wait(handles, timeout))
    for node in running:
        if node.conn in ready or node.proc.sentinel in ready:
            _read(node)


def _stop(node: _Node) -> None:
    """Kill the node's process group (a running node is marked stopped; an ended one's ranks may have outlived it)."""
    if node.ending is None:
        kill_group(node.proc)
        node.ending, node.exitcode = "stopped", node.proc.exitcode
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(node.proc.pid, signal.SIGKILL)
    node.conn.close()


def _endpoint(first: _Node, deadline: float) -> str | None:
    """Node 0's rendezvous endpoint, once it listens (None: it ended or the time ran out first)."""
    while first.ending is None and time.monotonic() < deadline:
        _wait([first], deadline)
        if isinstance(first.result, tuple):
            return str(first.result[1])
    return None


def measure_nodes(job: CellJob) -> Outcome:
    """The outcome of a multi-node cell (``job.cell.nodes`` > 1), its nodes run as processes of this machine."""
    ctx = job.ctx or mp.get_context("spawn")
    cell = job.cell
    per_node = cell.world_size // cell.nodes
    data: dict[str, Any] = dict(payload(job))
    if cell.device == "cpu" and not data.get("cpu_threads"):
        data["cpu_threads"] = max(1, (os.cpu_count() or 1) // cell.world_size)  # every node shares this host
    base = {"nnodes": cell.nodes, "run_id": f"ampsuite-{os.getpid()}-{uuid.uuid4().hex[:8]}", "local_addr": LOCAL_HOST}

    def node(rank: int, endpoint: str) -> dict[str, Any]:
        env = {"CUDA_VISIBLE_DEVICES": visible_devices(rank, per_node)} if cell.device == "cuda" else {}
        return {**base, "node_rank": rank, "endpoint": endpoint, "env": env}

    deadline = time.monotonic() + job.timeout
    nodes = [_start(ctx, data, node(0, f"{LOCAL_HOST}:0"))]
    try:
        endpoint = _endpoint(nodes[0], deadline)
        if endpoint is not None:
            nodes += [_start(ctx, data, node(k, endpoint)) for k in range(1, cell.nodes)]
        until, bad = deadline, []
        while any(n.ending is None for n in nodes) and time.monotonic() < until:
            _wait(nodes, until)
            bad = [n for n in nodes if _bad(n)]
            if any(n.ending == "died" for n in bad):
                break  # a dead node is the cause: the others' ranks fail because of it
            if bad:
                until = min(deadline, min(n.at for n in bad) + GRACE_SECONDS)
        # A reported failure is the cause even when the others then sat out the timeout.
        timed_out = time.monotonic() >= deadline and any(n.ending is None for n in nodes) and not bad
        node_stacks = _stacks(nodes, job) if timed_out else ""
    finally:
        for n in nodes:
            _stop(n)
    return _outcome(nodes, job, node_stacks if timed_out else None)


def measure_node(job: CellJob, place: NodePlace) -> Outcome | dict[str, Any]:
    """One node of a multi-node cell whose other nodes run elsewhere (a cluster executor's job, one call per host).

    The node runs as a process group of this host, as each node of :func:`measure_nodes` does, with the
    cell's timeout. Returns the cell's outcome on the node that held global rank 0 (or a failure's, with
    ``node``), else ``{"node_done": {...}, "node": node_rank}``. ``share_gpus``: this host stands in for
    several nodes, so the node sees only its share of the GPUs (:func:`visible_devices`).
    """
    ctx = job.ctx or mp.get_context("spawn")
    cell = job.cell
    node_rank, nnodes = place["node_rank"], place["nnodes"]
    per_node = cell.world_size // max(1, cell.nodes)
    shared = place.get("share_gpus", False) and cell.device == "cuda"
    env = {"CUDA_VISIBLE_DEVICES": visible_devices(node_rank, per_node)} if shared else {}
    spec = {"local_addr": None, **place, "env": env}
    spec.pop("share_gpus", None)
    deadline = time.monotonic() + job.timeout
    node = _start(ctx, dict(payload(job)), spec)
    try:
        while node.ending is None and time.monotonic() < deadline:
            _wait([node], deadline)
            if isinstance(node.result, tuple):  # node 0's endpoint: it listens; wait on for its result
                node.result = None
        node_stacks = _stacks([node], job) if node.ending is None else None
    finally:
        _stop(node)
    facts = {"world_size": cell.world_size, "node": node_rank, "nodes": [node.summary()]}
    tail = procs.log_tail(job.log)
    if node_stacks is not None:
        return outcome(
            Status.TIMEOUT, {"timeout_seconds": job.timeout, "stderr_tail": tail, "stacks": node_stacks, **facts}
        )
    if node.ending == "died":
        message = f"node {node_rank} of {nnodes} (pid {node.proc.pid}) {ended(node.exitcode)} before its result"
        evidence = {"message": message, "exitcode": node.exitcode, "signal": procs.signal_name(node.exitcode)}
        return outcome(Status.CRASHED, {**evidence, "stderr_tail": tail, **facts})
    if isinstance(node.result, dict) and "node_done" in node.result:
        return {"node_done": node.result["node_done"], "node": node_rank}
    result = checked(node.result, job.log)
    if result.get("status") != Status.PASSED:
        evidence = dict(result.get("evidence") or {})
        evidence.setdefault("node", node_rank)
        evidence.setdefault("world_size", cell.world_size)
        result = {**result, "evidence": evidence}
    return result


def _failure_order(node: _Node) -> tuple[int, float, float]:
    """Which node's failure is the cause: a rank that died without raising, then the earliest raise, then arrival."""
    evidence = node.result.get("evidence") if isinstance(node.result, dict) else None
    evidence = evidence if isinstance(evidence, dict) else {}
    raised_at = evidence.get("raised_at")
    return (
        0 if evidence.get("type") == "RankCrashed" else 1,
        float(raised_at) if isinstance(raised_at, int | float) else float("inf"),
        node.at,
    )


def _ranks_of(launcher: int, job: CellJob) -> list[tuple[int, int]]:
    """(rank, pid) of the ranks that ``launcher`` started, from the lines they write into the cell's log."""
    log = procs.log_since(job.log, 0, LOG_SCAN_BYTES)
    # (?!\d), not \b: a line another process's output follows at once (a writer that made two writes) still counts.
    found = re.findall(rf"ampsuite: rank (\d+) \(local \d+\) pid (\d+) launcher {launcher}(?!\d)", log)
    return sorted({(int(rank), int(pid)) for rank, pid in found})


def _stacks(nodes: list[_Node], job: CellJob) -> str:
    return "\n\n".join(
        f"node {n.rank} (pid {n.proc.pid}):\n{stacks(n.proc, job.log)}" for n in nodes if n.ending is None
    )


def _outcome(nodes: list[_Node], job: CellJob, timed_out_stacks: str | None) -> Outcome:
    # Each node with the ranks it started (pids from their start lines: the ranks of a node that died left no file).
    summary = [{**n.summary(), "ranks": [{"rank": r, "pid": p} for r, p in _ranks_of(n.proc.pid, job)]} for n in nodes]
    tail = procs.log_tail(job.log)
    facts = {"world_size": job.cell.world_size, "nodes": summary}
    dead = sorted((n for n in nodes if n.ending == "died"), key=lambda n: n.at)
    if dead:
        n = dead[0]
        ranks = [{"rank": r, "pid": pid, "alive": launcher_alive(pid)} for r, pid in _ranks_of(n.proc.pid, job)]
        return outcome(
            Status.CRASHED,
            {
                "message": f"node {n.rank} of {len(nodes)} (pid {n.proc.pid}) {ended(n.exitcode)} before its result",
                "exitcode": n.exitcode,
                "signal": procs.signal_name(n.exitcode),
                "stderr_tail": tail,
                "node": n.rank,
                "ranks": ranks,
                **facts,
            },
        )
    if timed_out_stacks is not None:
        return outcome(
            Status.TIMEOUT, {"timeout_seconds": job.timeout, "stderr_tail": tail, "stacks": timed_out_stacks, **facts}
        )
    failed = sorted((n for n in nodes if _bad(n)), key=lambda n: n.at)
    if failed:
        cause = min(failed, key=_failure_order)
        result = checked(cause.result, job.log)
        evidence = dict(result.get("evidence") or {})
        evidence.setdefault("node", cause.rank)
        evidence.setdefault("world_size", job.cell.world_size)
        evidence["nodes"] = summary
        return {**result, "evidence": evidence}
    if len(nodes) < job.cell.nodes or any(n.ending != "result" for n in nodes):
        return outcome(
            Status.CRASHED,
            {"message": "node 0 ended before its rendezvous store listened", "stderr_tail": tail, **facts},
        )
    combined = [n for n in nodes if "node_done" not in n.result]
    if len(combined) != 1:
        problem = f"{len(combined)} nodes sent the cell's result; exactly one (rank 0's) must"
        return outcome(
            Status.FAILED,
            {"type": "MalformedResult", "message": problem, "stderr_tail": tail, **facts},
            metrics={},
            numerics=None,
            diagnostics={},
            notes={},
            warnings=[],
        )
    result = checked(combined[0].result, job.log)
    notes = result.get("notes")
    distributed = notes.get("distributed") if isinstance(notes, dict) else None
    if isinstance(distributed, dict):
        ranks = distributed.get("ranks") or []
        distributed["node_processes"] = [
            {**n.summary(), "ranks": [r.get("rank") for r in ranks if r.get("launcher_pid") == n.proc.pid]}
            for n in nodes
        ]
    return result
