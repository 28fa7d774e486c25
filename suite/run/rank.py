"""What runs in one rank of a data-parallel cell (see :mod:`ampsuite.run.launcher` for the whole design).

A rank joins the process group, builds and measures its step like a
single-process cell (:func:`ampsuite.run.cell.measure_cell`), with the model
wrapped in DistributedDataParallel after the techniques (:func:`wrap_ddp`) and
a stopping rule every rank agrees on (:func:`agreed_time_steps`). A rank that
raises writes its evidence for the launcher before it dies.

In a cell spanning several nodes each node's launcher sees only its own
ranks, and the nodes need not share a filesystem: every rank's result is
gathered to rank 0 through torch.distributed (:func:`gather_results`), and
rank 0 returns them all to its node's launcher, which combines them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ampsuite.contract.errors import SkipCell
from ampsuite.results.atomic import write_json_atomic
from ampsuite.run import procs
from ampsuite.run.cell import classify, limit_memory, measure_cell
from ampsuite.spec.parallel import UNSUPPORTED_TECHNIQUES

__all__ = [
    "NVLS_ENV",
    "START_METHOD",
    "agreed_time_steps",
    "agreed_warm_up",
    "exchange",
    "gather_results",
    "rank_main",
    "wrap_ddp",
]

NVLS_ENV: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
"""NVLink multicast off, in every process the launcher starts (the shared GPU hosts require it)."""

START_METHOD = "spawn"
"""How the launcher starts ranks: no CUDA state is inherited."""


def exchange(value: Any) -> list[Any]:
    """Every rank's ``value``, in rank order (a collective: every rank must call it)."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def gather_results(value: Any) -> list[Any] | None:
    """Every rank's ``value`` in rank order on rank 0, None on the others (a collective: every rank must call it)."""
    import torch.distributed as dist

    gathered: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(value, gathered, dst=0)
    return gathered


def agreed_time_steps(run: Callable[..., Any], data: Callable[[], Any], device: Any, spec: Any) -> list[float]:
    """:func:`ampsuite.run.measure.time_steps` in chunks that every rank agrees on (see the module docstring)."""
    from ampsuite.run.measure import _next_chunk, _should_stop, time_steps

    samples: list[float] = []
    start = time.perf_counter()
    while True:
        elapsed = time.perf_counter() - start
        votes = exchange((bool(samples) and _should_stop(samples, spec, elapsed), elapsed))
        if all(stop for stop, _ in votes):
            return samples
        k = _next_chunk(len(samples), spec, votes[0][1])
        chunk = dataclasses.replace(spec, min_steps=k, max_steps=k, max_seconds=math.inf)
        samples.extend(time_steps(run, data, device, chunk))


def agreed_warm_up(run: Callable[..., Any], data: Callable[[], Any], device: Any, spec: Any) -> int:
    """:func:`ampsuite.run.measure.warm_up` in chunks every rank agrees on: rank 0's clock sizes each chunk, so
    every rank runs the same steps (a rank one step ahead would wait forever in an all-reduce)."""
    from ampsuite.run.measure import first_warm_up_chunk, next_warm_up_chunk, warm_up

    start, steps = time.perf_counter(), 0
    chunk = first_warm_up_chunk(spec)
    while chunk > 0:
        steps += warm_up(run, data, device, dataclasses.replace(spec, warmup_steps=chunk, warmup_seconds=0.0))
        chunk = next_warm_up_chunk(spec, steps, exchange(time.perf_counter() - start)[0])
    return steps


def wrap_ddp(step: Any) -> Any:
    """Wrap the step's model in DistributedDataParallel (after the techniques; see the module docstring), unless
    a technique sharded it with FSDP2 (``notes.fsdp2``) over the ranks' group."""
    from torch.nn.parallel import DistributedDataParallel

    if "fsdp2" in step.notes:
        return step  # sharded by the fsdp2 technique, which reduces the gradients itself
    if step.model is None or step.loss_fn is None:
        raise SkipCell("gpus > 1 wraps the workload's model in DistributedDataParallel; this step has no model/loss_fn")
    if step.forward_backward is not None:
        raise SkipCell(
            "gpus > 1 needs the standard forward/backward phase (DistributedDataParallel all-reduces the gradients "
            "there); this step's forward_backward was replaced by its workload or a technique"
        )
    if "cuda_graphs" in step.notes:
        raise SkipCell(UNSUPPORTED_TECHNIQUES["cuda-graphs"])
    device_ids = [step.device.index] if step.device.type == "cuda" else None
    step.model = DistributedDataParallel(step.model, device_ids=device_ids)
    return step


def rank_main(payload: dict[str, Any]) -> dict[str, Any]:
    """The entry point of one rank (started by the launcher; ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` set).

    Returns rank's result (the launcher hands it to :func:`combine`); on any
    exception it writes its evidence for the worker first, then raises, so
    that the launcher stops the other ranks.
    """
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    rank_dir = Path(payload["rank_dir"])
    # The launcher (the cell's worker) is this rank's parent and owns the process group
    # the runner kills; the rank's output already goes to the cell's log through it.
    procs.start_child(None, new_session=False, parent_pid=int(payload["launcher_pid"]))
    (rank_dir / f"rank-{rank}.pid").write_text(str(os.getpid()))
    launcher = int(payload["launcher_pid"])
    procs.log_line(f"ampsuite: rank {rank} (local {local_rank}) pid {os.getpid()} launcher {launcher}")
    state: dict[str, Any] = {"phase": "start"}
    try:
        return _run_rank(payload, rank, local_rank, state)
    except BaseException as exc:
        report = {"time": time.time(), "result": classify(exc, state)}
        write_json_atomic(rank_dir / f"rank-{rank}.json", report, default=repr, allow_nan=True)
        raise


def _run_rank(payload: dict[str, Any], rank: int, local_rank: int, state: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    cell = dict(payload["cell"])
    if cell["device"] == "cpu" and payload.get("memory_limit_bytes"):
        limit_memory(int(payload["memory_limit_bytes"]))
    cuda = cell["device"] == "cuda"
    if cuda:
        torch.cuda.set_device(local_rank)
        cell["device"] = f"cuda:{local_rank}"
    backend = "nccl" if cuda else "gloo"
    state["phase"] = f"init_process_group ({backend})"
    dist.init_process_group(backend, device_id=torch.device(cell["device"]) if cuda else None)
    result = measure_cell(
        {**payload, "cell": cell}, state, prepare=wrap_ddp, timer=agreed_time_steps, warmer=agreed_warm_up
    )
    result["rank_info"] = {
        "rank": rank,
        "local_rank": local_rank,
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "launcher_pid": int(payload["launcher_pid"]),
        "device": cell["device"],
        # Which physical GPUs "cuda:N" is among: nodes stood in on one host each see only their share.
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "backend": backend,
        "env": {name: os.environ.get(name) for name in NVLS_ENV},
    }
    if int(cell.get("nodes", 1)) > 1:
        # The node's label (its launcher's node_rank) and the rendezvous' own (GROUP_RANK, which orders the ranks).
        result["rank_info"].update(node=payload.get("node_rank"), group_rank=int(os.environ.get("GROUP_RANK", "0")))
        state["phase"] = "gather results"
        result["gathered"] = gather_results(result)
    state["phase"] = "destroy_process_group"
    dist.destroy_process_group()
    return result
