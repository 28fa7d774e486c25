"""Results records and documents for the tests of what reads them: analysis, reports, history.

``cell`` builds one cell's record with the fields the analysis and reports read, the figures a test names and
plausible values for the rest; ``parallel_record`` one of a data-parallel or multi-node cell; ``doc`` a results
document of records. ``sealed`` gives a document the integrity checksum the writer would store, so that an edited run
still loads (``write_sealed`` writes it to a file). ``asv_result_file`` builds one file of an asv results directory.
Figures a test does not name are not what it checks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ampsuite import results

TECHS: dict[str, list[dict[str, Any]]] = {
    "fp32": [],
    "tf32": [{"name": "tf32", "options": {}}],
    "amp": [{"name": "amp", "options": {"dtype": "bfloat16"}}],
    "amp-fp16": [{"name": "amp", "options": {"dtype": "float16"}}],
}
"""The techniques of each combination :func:`cell` knows: FP32, TF32 (the suites' baseline) and AMP in two dtypes."""


def cell(
    combination: str,
    *,
    median: float | None = 0.01,
    status: str = "passed",
    batch: int = 32,
    workload: str = "toy",
    options: dict[str, Any] | None = None,
    device: str = "cuda",
    noise: float = 0.002,
    iqr: float | None = None,
    memory: int | None = None,
    memory_kind: str = "cuda-allocated",
    loss: float | None = 1.0,
    nonfinite: str | None = None,
    scaler: bool = False,
    warnings: list[str] | None = None,
    matmul_dtype: str | None = None,
    tflops: float | None = None,
    flops_per_step: float | None = None,
    baseline: str = "tf32",
) -> dict[str, Any]:
    """A record of the cell ``WORKLOAD/COMBINATION/bsBATCH`` on one GPU: passed with a step time of ``median`` seconds
    (throughput = batch / median) and a loss of ``loss`` at the last numerics step, unless ``status`` says otherwise;
    only the metrics given are present, as in a record of a run that did not measure them."""
    record: dict[str, Any] = {
        "id": f"{workload}/{combination}/bs{batch}",
        "status": status,
        "device": device,
        "batch_size": batch,
        "combination": combination,
        "baseline": baseline,
        "workload": {"id": workload, "plugin": "p", "options": options or {"width": 8}, "unit": "samples"},
        "techniques": TECHS[combination],
        "warnings": list(warnings or []),
        "evidence": None if status == "passed" else {"reason": "x"},
        "metrics": {},
        "numerics": {},
    }
    if status != "passed" or median is None:
        return record
    metrics: dict[str, Any] = {
        "step_time": {"median": median, "noise": noise, "iqr": median * 0.004 if iqr is None else iqr},
        "throughput": batch / median,
    }
    if memory is not None:
        metrics |= {"peak_memory_bytes": memory, "memory_kind": memory_kind}
    if matmul_dtype is not None:
        metrics["matmul_dtype"] = matmul_dtype
    if tflops is not None:
        metrics["tflops"] = tflops
    if flops_per_step is not None:
        metrics["flops_per_step"] = flops_per_step
    record["metrics"] = metrics
    record["numerics"] = {
        "losses": [2.0, loss],
        "loss_at_n": loss,
        "nonfinite_step": 1 if nonfinite else None,
        "nonfinite_what": nonfinite,
        "scale_history": [65536.0, 32768.0] if scaler else None,
    }
    return record


def doc(
    *cells: dict[str, Any],
    tolerance: float | None = None,
    noise_target: float | None = None,
    peaks: dict[str, float] | None = None,
    gpu: str | None = "NVIDIA H200",
    commit: str = "abc",
    started: str = "2025-01-01T00:00:00+00:00",
    run_id: str = "r1",
) -> dict[str, Any]:
    """A results document of ``cells`` from one run of suite "s" (baseline TF32) on an H200 unless ``gpu`` says
    otherwise; ``peaks`` are the measured matmul TFLOP/s by dtype."""
    suite: dict[str, Any] = {"name": "s", "baseline": "tf32"}
    if tolerance is not None:
        suite["numerics_tolerance"] = tolerance
    run: dict[str, Any] = {"id": run_id, "started": started, "suite": suite}
    if noise_target is not None:
        run["measure"] = {"noise_target": noise_target}
    return {
        "format": "ampsuite-results",
        "version": 1,
        "run": run,
        "environment": {
            "gpu": {"name": gpu} if gpu else None,
            "cpu": "cpu-x",
            "workdir_commit": commit,
            "peaks": {"matmul_tflops": peaks} if peaks else None,
        },
        "cells": list(cells),
    }


def sealed(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with the integrity checksum the writer would store for its content: edited documents stay loadable."""
    doc["integrity"] = {"sha256": results.checksum(doc)}
    return doc


def write_sealed(path: Path, doc: dict[str, Any]) -> Path:
    """``path``, written as the results file ``doc`` would be (its checksum recomputed): an edited run that loads."""
    path.write_text(json.dumps(sealed(doc)), encoding="utf-8")
    return path


def asv_result_file(commit: str, date_ms: int, machine: str, benchmarks: dict[str, list[Any]]) -> dict[str, Any]:
    """One file of an asv results directory (results format 2): ``benchmarks`` maps a benchmark's name to its row,
    ``[results, params, version, started_at, duration, stats_ci_99_a, stats_ci_99_b]`` (trailing columns may be left
    out, as asv leaves them out)."""
    return {
        "commit_hash": commit,
        "env_name": "ampsuite-venv-py3.11",
        "date": date_ms,
        "params": {"machine": machine, "python": "3.11"},
        "python": "3.11",
        "requirements": {},
        "env_vars": {},
        "result_columns": ["result", "params", "version", "started_at", "duration", "stats_ci_99_a", "stats_ci_99_b"],
        "results": benchmarks,
        "durations": {},
        "version": 2,
    }


def parallel_record(
    cell_id: str, throughput: float, *, world: int | None = 1, nodes: int = 1, batch: int = 8, combination: str = "fp32"
) -> dict[str, Any]:
    """A passed record of the toy cell ``cell_id`` on ``world`` processes (None: a record written before world_size
    existed, of one process) over ``nodes`` nodes, at ``throughput`` samples/s in all, each process stepping over
    ``batch`` samples; a combination other than FP32 is the technique of its name."""
    record: dict[str, Any] = {
        "id": cell_id,
        "status": "passed",
        "device": "cpu",
        "batch_size": batch,
        "combination": combination,
        "baseline": "fp32",
        "workload": {"id": "toy", "options": {}},
        "techniques": [] if combination == "fp32" else [{"name": combination, "options": {}}],
        "metrics": {"throughput": throughput, "step_time": {"median": batch * (world or 1) / throughput}},
    }
    if world is not None:
        record["world_size"] = world
    if nodes > 1:
        record["nodes"] = nodes
    return record
