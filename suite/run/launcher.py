"""Data-parallel cells, the worker's side: one process per GPU (gloo on a CPU), started by torch's own launcher.

A workload's ``gpus = N`` (and ``nodes = M``) makes cells of world size N (M x N) whose worker launches the ranks
with ``torch.distributed.launcher.api.elastic_launch``, the engine behind ``torchrun``; each rank runs
:mod:`ampsuite.run.rank` and the node holding rank 0 combines their results into one record (:func:`combine`).
docs/cluster.md ("How a data-parallel cell runs") gives the design: the order of DDP and the techniques, how the
ranks agree when to stop, which rank's figures the record keeps, and how a failing rank is reported.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ampsuite.contract.wire import Status
from ampsuite.run import measure, procs
from ampsuite.run.rank import NVLS_ENV, START_METHOD, rank_main

__all__ = ["MONITOR_INTERVAL", "NVLS_ENV", "SHUTDOWN_SECONDS", "alive", "combine", "run_cell", "run_node"]

MONITOR_INTERVAL = 0.1
"""Seconds between the launcher's looks at its ranks: a failed rank is noticed (and the others stopped) this fast."""
SHUTDOWN_SECONDS = 5
"""How long the launcher waits after SIGTERM before it SIGKILLs the ranks it stops."""


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, dead but not yet reaped, counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _rank_files(rank_dir: Path, suffix: str) -> dict[int, Path]:
    found = {}
    for path in rank_dir.glob(f"rank-*{suffix}"):
        with contextlib.suppress(ValueError):
            found[int(path.name.removeprefix("rank-").removesuffix(suffix))] = path
    return found


def _pids(rank_dir: Path) -> dict[int, int]:
    pids = {}
    for rank, path in _rank_files(rank_dir, ".pid").items():
        with contextlib.suppress(OSError, ValueError):
            pids[rank] = int(path.read_text().strip())
    return pids


def _failure(
    exc: Any, rank_dir: Path, local_ranks: Iterable[int], world_size: int, log_path: str | None
) -> dict[str, Any]:
    """The cell's result from the launcher's ChildFailedError and the evidence files ``local_ranks`` left."""
    reports: dict[int, dict[str, Any]] = {}
    for rank, path in _rank_files(rank_dir, ".json").items():
        with contextlib.suppress(OSError, ValueError):
            reports[rank] = json.loads(path.read_text(encoding="utf-8"))
    detected_rank, failure = exc.get_first_failure()
    pids = _pids(rank_dir)
    ranks = []
    for rank in sorted({*local_ranks, detected_rank}):
        pid = pids.get(rank)
        entry: dict[str, Any] = {"rank": rank, "pid": pid, "alive": None if pid is None else alive(pid)}
        if rank in reports:
            entry["raised"] = reports[rank]["result"].get("evidence", {}).get("type")
        if rank == detected_rank:
            entry.update(exitcode=failure.exitcode, signal=failure.signal_name() if failure.exitcode < 0 else None)
        ranks.append(entry)
    if reports and detected_rank in reports:
        # The first to raise is the cause; later ones usually failed in a collective that lost its peer.
        rank = min(reports, key=lambda r: (reports[r]["time"], r))
        result = dict(reports[rank]["result"])
        evidence = dict(result.get("evidence") or {})
        evidence["raised_at"] = reports[rank]["time"]  # seconds since the epoch: nodes' failures are ordered by it
    else:
        # The first rank to end died without raising (a signal, os._exit): the others' errors followed from it.
        rank = detected_rank
        how = f"signal {failure.signal_name()}" if failure.exitcode < 0 else f"exit code {failure.exitcode}"
        message = failure.message.get("message") if isinstance(failure.message, dict) else failure.message
        result = {"status": Status.FAILED, "metrics": {}, "numerics": None}
        evidence = {
            "type": "RankCrashed",
            "message": f"rank {rank} died ({how}) without raising an exception",
            "launcher_message": str(message or ""),
            "phase": "ranks",
            "exitcode": failure.exitcode,
            "signal": failure.signal_name() if failure.exitcode < 0 else None,
            "stderr_tail": procs.log_tail(log_path),
        }
    evidence.update(rank=rank, world_size=world_size, ranks=ranks)
    result["evidence"] = evidence
    result.setdefault("diagnostics", {})
    result.setdefault("notes", {})
    result.setdefault("warnings", [])
    return result


def _median(result: Mapping[str, Any]) -> float:
    return float(result["metrics"]["step_time"]["median"])


def combine(results: Mapping[int, Mapping[str, Any]], world_size: int) -> dict[str, Any]:
    """One cell result from every rank's (all passed): rank 0's facts, the slowest rank's timing.

    See the module docstring ("The record") for what each metric means.
    """
    ranks = [results[r] for r in range(world_size)]
    first = ranks[0]
    slowest = max(range(world_size), key=lambda r: (_median(ranks[r]), -r))
    per_rank_samples = first["metrics"]["samples_per_step"]
    step_time = ranks[slowest]["metrics"]["step_time"]
    median = float(step_time["median"])
    metrics = dict(first["metrics"])
    metrics.update(
        world_size=world_size,
        step_time=step_time,
        samples_per_step=world_size * per_rank_samples,
        samples_per_step_per_gpu=per_rank_samples,
        throughput_per_gpu=per_rank_samples / median,
        slowest_rank=slowest,
        ranks=[
            {
                "rank": r,
                "median": _median(res),
                "noise": res["metrics"]["step_time"].get("noise"),
                "n": res["metrics"]["step_time"].get("n"),
                "warmup_steps": res["metrics"].get("warmup_steps"),
                "throughput": res["metrics"]["samples_per_step"] / _median(res),
                "peak_memory_bytes": res["metrics"].get("peak_memory_bytes"),
                "final_loss": (res.get("numerics") or {}).get("final_loss"),
            }
            for r, res in enumerate(ranks)
        ],
    )
    measure.rates(metrics, median)  # total throughput (samples_per_step covers every rank); TFLOP/s per GPU
    peaks = [m for m in (res["metrics"].get("peak_memory_bytes") for res in ranks) if m is not None]
    if peaks:
        metrics["peak_memory_bytes"] = max(peaks)
    warnings = list(first.get("warnings") or [])
    for r, res in enumerate(ranks[1:], start=1):
        warnings += [f"rank {r}: {w}" for w in res.get("warnings") or [] if w not in warnings]
    notes = dict(first.get("notes") or {})
    info = [res["rank_info"] for res in ranks]
    notes["distributed"] = {
        "world_size": world_size,
        "nodes": 1,
        "backend": info[0]["backend"],
        "launcher": "torch.distributed.launcher.api.elastic_launch",
        "start_method": START_METHOD,
        "wrapper": "FSDP2 (the fsdp2 technique)"
        if "fsdp2" in notes
        else "torch.nn.parallel.DistributedDataParallel (defaults)",
        "step_agreement": "chunk sizes from rank 0; timing stops when every rank's stopping rule says stop",
        "data": "every rank trains on the same seeded batches",
        "ranks": info,
    }
    return {
        "status": Status.PASSED,
        "metrics": metrics,
        "numerics": first.get("numerics"),
        "diagnostics": first.get("diagnostics") or {},
        "notes": notes,
        "warnings": warnings,
        "evidence": None,
    }


def _launch_config(
    world_size: int,
    nnodes: int,
    rank_dir: Path,
    *,
    run_id: str,
    endpoint: str,
    rdzv_configs: Mapping[str, Any] | None = None,
    local_addr: str | None = None,
) -> Any:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig

    # shutdown_timeout is newer than torch 2.11's LaunchConfig: pass it only where it exists.
    extra: dict[str, Any] = (
        {"shutdown_timeout": SHUTDOWN_SECONDS} if "shutdown_timeout" in LaunchConfig.__dataclass_fields__ else {}
    )
    return LaunchConfig(
        min_nodes=nnodes,
        max_nodes=nnodes,
        nproc_per_node=world_size // nnodes,
        run_id=run_id,
        rdzv_backend="c10d",
        rdzv_endpoint=endpoint,
        rdzv_configs=dict(rdzv_configs or {}),
        local_addr=local_addr,
        max_restarts=0,
        monitor_interval=MONITOR_INTERVAL,
        start_method=START_METHOD,
        logs_specs=DefaultLogsSpecs(log_dir=str(rank_dir / "elastic")),
        **extra,
    )


def _rank_dir(payload: Mapping[str, Any]) -> Path:
    """A fresh folder for this launcher's ranks' pid and evidence files, beside the cell's log (local to the node)."""
    log_path = payload.get("log_path")
    base = Path(log_path).parent if log_path else None
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=(Path(log_path).stem if log_path else "cell") + "-ranks-", dir=base))


def _rank_payload(payload: Mapping[str, Any], rank_dir: Path, processes_here: int) -> dict[str, Any]:
    rank_payload = {**payload, "rank_dir": str(rank_dir), "launcher_pid": os.getpid()}
    if payload["cell"]["device"] == "cpu" and not payload.get("cpu_threads"):
        rank_payload["cpu_threads"] = max(1, (os.cpu_count() or 1) // processes_here)
    return rank_payload


def run_cell(payload: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """Launch the cell's ranks from this (worker) process and return the cell's result (record parts)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    world_size = int(payload["cell"]["world_size"])
    rank_dir = _rank_dir(payload)
    rank_payload = _rank_payload(payload, rank_dir, world_size)
    run_id = f"ampsuite-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    config = _launch_config(world_size, 1, rank_dir, run_id=run_id, endpoint="127.0.0.1:0")
    state["phase"] = f"ranks (world size {world_size})"
    try:
        with _environment(NVLS_ENV):  # inherited by every rank the launcher starts
            results = elastic_launch(config, rank_main)(rank_payload)
    except ChildFailedError as exc:
        return _failure(exc, rank_dir, range(world_size), world_size, payload.get("log_path"))
    return combine(results, world_size)


def run_node(
    payload: dict[str, Any],
    state: dict[str, Any],
    *,
    node_rank: int,
    nnodes: int,
    endpoint: str,
    run_id: str,
    local_addr: str | None = None,
    on_endpoint: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run one node of a multi-node cell: launch this node's ranks and join the other nodes' through torch's rendezvous.

    Every node of the cell calls this with the same ``payload`` (its ``cell``
    has ``nodes`` = ``nnodes`` and ``world_size`` = ``nnodes`` x processes per
    node), ``endpoint`` and ``run_id``, and its own ``node_rank`` (0 ..
    ``nnodes`` - 1); see "Several nodes" in the module docstring.

    :param payload: the worker payload (:func:`ampsuite.run.attempt.payload`); its ``log_path``
        and the ranks' files are this node's own (no shared filesystem is assumed).
    :param state: filled as the node progresses (``phase``), for evidence.
    :param node_rank: this node's label; node 0 hosts the rendezvous store.
    :param nnodes: how many nodes join (the rendezvous waits for all of them).
    :param endpoint: ``host:port`` of the c10d rendezvous store, on node 0's host.
        Port 0 (node 0 only) makes node 0 bind a free port itself and report the
        endpoint the other nodes must use through ``on_endpoint`` before it waits for them.
    :param run_id: the rendezvous id, the same on every node and unique per cell (a Slurm job id, say).
    :param local_addr: this node's address as the other nodes reach it (rank 0's node hosts
        the ranks' store there); None: torch's lookup of the host name.
    :param on_endpoint: called with the endpoint in use once node 0's store listens.
    :return: on the node that holds global rank 0, the cell's result (every rank's
        combined, as :func:`run_cell` returns it); on the others a small
        ``{"node_done": {...}}``; a failed rank's evidence (plus ``node``) when one failed.
    """
    from torch.distributed import TCPStore
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    cell = payload["cell"]
    world_size = int(cell["world_size"])
    if int(cell.get("nodes", 1)) != nnodes or world_size % nnodes:
        raise ValueError(
            f"cell {cell['id']!r} spans {cell.get('nodes', 1)} node(s) of world size {world_size}, not {nnodes}"
        )
    if not 0 <= node_rank < nnodes:
        raise ValueError(f"node_rank must be in [0, {nnodes}), got {node_rank}")
    host, _, port = endpoint.rpartition(":")
    store = None
    is_host = node_rank == 0
    if int(port) == 0:
        if node_rank != 0:
            raise ValueError(f"only node 0 may be given port 0 (it then binds one); node {node_rank} got {endpoint!r}")
        # Node 0 binds the rendezvous store itself, on a port the kernel picks, and only then tells
        # the other nodes where it is: no port is chosen, closed and re-bound, so none can be taken
        # by another process in between. The store lives as long as this call (a reference kept).
        store = TCPStore(host, 0, is_master=True, wait_for_workers=False)
        endpoint, is_host = f"{host}:{store.port}", False  # the launcher connects to it as a client
    if on_endpoint is not None:
        on_endpoint(endpoint)
    rank_dir = _rank_dir(payload)
    rank_payload = _rank_payload(payload, rank_dir, world_size // nnodes)
    rank_payload["node_rank"] = node_rank
    config = _launch_config(
        world_size,
        nnodes,
        rank_dir,
        run_id=run_id,
        endpoint=endpoint,
        rdzv_configs={"is_host": is_host},
        local_addr=local_addr,
    )
    state["phase"] = f"node {node_rank} of {nnodes} (world size {world_size})"
    try:
        with _environment(NVLS_ENV):
            results = elastic_launch(config, rank_main)(rank_payload)
    except ChildFailedError as exc:
        result = _failure(exc, rank_dir, sorted(_pids(rank_dir)), world_size, payload.get("log_path"))
        result["evidence"]["node"] = node_rank
        return result
    if 0 not in results:
        return {"node_done": {"node_rank": node_rank, "pid": os.getpid(), "ranks": sorted(results)}}
    gathered = results[0]["gathered"]
    combined = combine(dict(enumerate(gathered)), world_size)
    combined["notes"]["distributed"].update(
        nodes=nnodes,
        nproc_per_node=world_size // nnodes,
        rendezvous={"backend": "c10d", "endpoint": endpoint, "run_id": run_id, "host": "node 0"},
        gather="every rank's result gathered to rank 0 by torch.distributed.gather_object",
    )
    return combined


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in os.environ within the block (so an in-process run does not keep them)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
