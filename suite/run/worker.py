"""The entry points of a cell's worker process and of the device-peaks process.

:func:`main` measures one cell (:func:`run_cell`: in this process, or its
ranks launched from here), checks its own result and sends exactly one
outcome. What runs inside lives in :mod:`ampsuite.run.cell`; its names are
re-exported here for the callers that know the worker. The module imports torch (through
:mod:`ampsuite.run.cell`) at import time on purpose: the runner preloads it in
the fork server, so workers start without paying for the import.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

from ampsuite.contract.wire import Outcome, Status, json_problem, outcome, size_problem
from ampsuite.host.manager import Registry
from ampsuite.run import launcher, procs
from ampsuite.run.cell import build_step, classify, limit_memory, mapped_bytes, measure_cell, traceback_tail
from ampsuite.run.resultcheck import refused

__all__ = [
    "build_step",
    "classify",
    "limit_memory",
    "main",
    "mapped_bytes",
    "measure_cell",
    "node_main",
    "peaks_main",
    "run_cell",
    "unsendable",
]


def run_cell(
    payload: dict[str, Any], state: dict[str, Any] | None = None, registry: Registry | None = None
) -> dict[str, Any]:
    """Measure one cell; returns the record parts (status ``passed``).

    A cell of world size > 1 (suite-file ``gpus``) is handed to
    :func:`ampsuite.run.launcher.run_cell`, which launches its ranks from here; each
    rank loads its own plugins, so ``registry`` does not reach them.

    :param state: filled as the cell progresses (phase, partial metrics), so that
        an exception can still be reported with what was known.
    :param registry: the parent's registry when running in-process (it may hold
        plugin objects registered directly); workers load their own.
    """
    if int(payload["cell"].get("world_size", 1)) > 1:
        return launcher.run_cell(payload, state if state is not None else {})
    return measure_cell(payload, state, registry)


def unsendable(result: Any, exc: BaseException) -> Outcome:
    """The failed outcome sent instead of a result that could not be sent (pickled) to the runner."""
    evidence = {
        "type": "UnsendableResult",
        "message": f"the worker's result could not be sent to the runner: {type(exc).__name__}: {exc}"[:2000],
        "traceback": traceback_tail("".join(traceback.format_exception(exc))),
        "phase": "send result",
        "result_status": str(result.get("status")) if isinstance(result, dict) else None,
    }
    return outcome(Status.FAILED, evidence, metrics={}, numerics=None, diagnostics={}, notes={}, warnings=[])


def _send(conn: Any, result: Any, log_path: str) -> None:
    # Checked here, not only by the runner: a value that is not JSON data (a tensor
    # in notes) may not survive the trip at all once this process exits.
    problem = json_problem(result) or size_problem(result)
    if problem:
        sys.stderr.flush()
        result = refused(problem, procs.log_tail(log_path))
    try:
        conn.send(result)
    except Exception as exc:  # a plugin put something unpicklable into the result
        conn.send(unsendable(result, exc))


def main(payload: dict[str, Any], conn: Any) -> None:
    """Entry point of the worker process: measure, send one result, exit."""
    procs.start_child(payload["log_path"])
    # A data-parallel cell's ranks set their own limit (ampsuite.run.rank): a
    # limit set here would be inherited by ranks that map more than this process.
    single = int(payload["cell"].get("world_size", 1)) <= 1
    if payload.get("memory_limit_bytes") and payload["cell"]["device"] == "cpu" and single:
        limit_memory(int(payload["memory_limit_bytes"]))
    state: dict[str, Any] = {}
    try:
        result: Any = run_cell(payload, state)
    except BaseException as exc:  # everything becomes evidence; nothing escapes unreported
        result = classify(exc, state)
    try:
        _send(conn, result, payload["log_path"])
        conn.close()
    finally:
        _exit()


def node_main(payload: dict[str, Any], node: dict[str, Any], conn: Any) -> None:
    """Entry point of one node process of a multi-node cell run on this machine (:mod:`ampsuite.run.nodes`).

    ``node`` holds :func:`ampsuite.run.launcher.run_node`'s keywords (``node_rank``,
    ``nnodes``, ``endpoint``, ``run_id``) and ``env``, variables set before the
    ranks start (the stand-in's ``CUDA_VISIBLE_DEVICES`` share). Sends node 0's
    rendezvous endpoint as ``("endpoint", "host:port")`` as soon as it listens, then
    exactly one result: the cell's, ``{"node_done": ...}``, or the evidence of a failure.
    """
    procs.start_child(payload["log_path"])
    os.environ.update(node.get("env") or {})
    node_rank = int(node["node_rank"])
    procs.log_line(f"ampsuite: node {node_rank} of {node['nnodes']} pid {os.getpid()}")
    state: dict[str, Any] = {}
    try:
        result: Any = launcher.run_node(
            payload,
            state,
            node_rank=node_rank,
            nnodes=int(node["nnodes"]),
            endpoint=str(node["endpoint"]),
            run_id=str(node["run_id"]),
            local_addr=node.get("local_addr"),
            on_endpoint=lambda endpoint: conn.send(("endpoint", endpoint)),
        )
    except BaseException as exc:
        result = classify(exc, state)
        if isinstance(result.get("evidence"), dict):
            result["evidence"]["node"] = node_rank
    try:
        _send(conn, result, payload["log_path"])
        conn.close()
    finally:
        _exit()


def _exit() -> None:
    procs.end_descendants()  # what the cell started (a build's server, a double fork) ends with it
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: DataLoader workers, CUDA contexts and
    # compile threads have nothing left to do, and teardown can hang.
    os._exit(0)


def peaks_main(device_type: str, refresh: bool, log_path: str, conn: Any) -> None:
    """Entry point of the process that measures the device's peaks before the cells."""
    procs.start_child(log_path)
    try:
        from ampsuite.run.peaks import cache_file, measure_peaks

        conn.send({"peaks": measure_peaks(device_type, refresh=refresh), "cache": str(cache_file(device_type))})
    except BaseException as exc:
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        _exit()
