"""CSV export: one row per cell with the main measured and derived figures.

``batch_size`` is per process; ``world_size`` is the processes (GPUs) a cell
ran data-parallel on (1 for a one-process cell), ``throughput`` the total over
them, and ``scaling_efficiency`` (empty unless world size > 1) the total /
(world size x the one-process cell's throughput), as in :mod:`ampsuite.analysis`.

Numbers are written exactly (``repr``), empty when absent; text is written
as it is (the CSV module quotes it), except that a text cell beginning with
``= + - @`` or a control character gets a leading apostrophe, so that a cell
or plugin name cannot run as a spreadsheet formula.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any

from ampsuite import analysis
from ampsuite.analysis import Across, as_mapping
from ampsuite.analysis import AnyDocument as Doc
from ampsuite.contract.wire import Status
from ampsuite.report.views import techniques_text

__all__ = ["COLUMNS", "MACHINE_COLUMNS", "csv_rows", "machine_csv_rows", "write_csv", "write_machines_csv"]

COLUMNS = (
    "run_id",
    "cell_id",
    "status",
    "workload",
    "plugin",
    "combination",
    "techniques",
    "batch_size",
    "world_size",
    "nodes",
    "device",
    "gpu",
    "unit",
    "throughput",
    "step_time_median_s",
    "step_time_noise",
    "step_time_p10_s",
    "step_time_p90_s",
    "speedup_vs_fp32",
    "speedup_vs_tf32",
    "speedup_vs_baseline",
    "scaling_efficiency",
    "peak_memory_bytes",
    "memory_kind",
    "memory_saving",
    "tflops",
    "mfu",
    "bandwidth_util",
    "matmul_dtype",
    "model_tflops",
    "mfu_datasheet",
    "mfu_measured",
    "mfu_basis",
    "loss_at_n",
    "loss_rel_diff",
    "numerics_verdict",
    "trusted",
    "warnings",
    "evidence",
)

DERIVED_COLUMNS = (
    "speedup_vs_fp32",
    "speedup_vs_tf32",
    "speedup_vs_baseline",
    "scaling_efficiency",
    "memory_saving",
    "tflops",
    "mfu",
    "bandwidth_util",
    "loss_rel_diff",
)
"""The columns that are a cell's derived figure of the same name (:class:`ampsuite.analysis.Derived`)."""

MACHINE_COLUMNS = (
    "cell_id",
    "workload",
    "unit",
    "machine",
    "file",
    "run_id",
    "status",
    "throughput",
    "speedup_vs_baseline",
    "baseline_cell",
    "peak_memory_bytes",
    "memory_kind",
    "mfu",
    "ratio_to_first",
    "trusted",
    "untrusted_reason",
    "evidence",
)
"""machines.csv (written when the documents come from several machines): a row per cell and machine
that ran it, for each cell on at least two machines; ``ratio_to_first`` is the throughput over the first
machine's for the same cell; ``trusted`` and ``untrusted_reason`` are the cell's own run's judgement of its
timing (``analysis.Derived.trusted``/``trust_note``), as results.csv and the pages mark it."""

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _text(value: Any) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return ""
    return repr(value)


def _evidence(record: Mapping[str, Any]) -> str:
    evidence = record.get("evidence")
    if not isinstance(evidence, Mapping):
        return ""
    for key in ("reason", "message", "signal", "timeout_seconds"):
        if evidence.get(key) is not None:
            return " ".join(str(evidence[key]).split())
    return ""


def csv_rows(docs: Sequence[Doc]) -> list[dict[str, str]]:
    rows = []
    for doc in docs:
        derived = analysis.derive(doc)
        run_id = (doc.get("run") or {}).get("id")
        gpu = (doc.get("environment") or {}).get("gpu")
        gpu_name = gpu.get("name") if isinstance(gpu, Mapping) else None
        for record in doc.get("cells") or []:
            d = derived[str(record.get("id"))]
            metrics = as_mapping(record.get("metrics"))
            step = as_mapping(metrics.get("step_time"))
            workload = as_mapping(record.get("workload"))
            numerics = as_mapping(record.get("numerics"))
            timed = record["status"] == Status.PASSED
            rows.append(
                {
                    "run_id": _text(run_id),
                    "cell_id": _text(record.get("id")),
                    "status": _text(record.get("status")),
                    "workload": _text(workload.get("id")),
                    "plugin": _text(workload.get("plugin")),
                    "combination": _text(analysis.combination_label(record)),
                    "techniques": _text(techniques_text(record)),
                    "batch_size": _number(record.get("batch_size")),
                    "world_size": _number(analysis.world_size(record)),
                    "nodes": _number(analysis.nodes(record)),
                    "device": _text(record.get("device")),
                    "gpu": _text(gpu_name),
                    "unit": _text(workload.get("unit")),
                    "throughput": _number(analysis.throughput(record)),
                    "step_time_median_s": _number(step.get("median")) if timed else "",
                    "step_time_noise": _number(step.get("noise")) if timed else "",
                    "step_time_p10_s": _number(step.get("p10")) if timed else "",
                    "step_time_p90_s": _number(step.get("p90")) if timed else "",
                    **{name: _number(getattr(d, name)) for name in DERIVED_COLUMNS},
                    "peak_memory_bytes": _number(metrics.get("peak_memory_bytes")),
                    "memory_kind": _text(metrics.get("memory_kind")),
                    "matmul_dtype": _text(metrics.get("matmul_dtype")),
                    "model_tflops": _number(d.model_tflops),
                    "mfu_datasheet": _number(d.mfu_datasheet),
                    "mfu_measured": _number(d.mfu_measured),
                    "mfu_basis": _text(d.mfu_basis),
                    "loss_at_n": _number(numerics.get("loss_at_n")),
                    "numerics_verdict": d.numerics_verdict,
                    "trusted": "true" if d.trusted else "false",
                    "warnings": _text(" | ".join(str(w) for w in record.get("warnings") or [])),
                    "evidence": _text(_evidence(record)),
                }
            )
    return rows


def write_csv(docs: Doc | Sequence[Doc], path: str | Path) -> Path:
    """Write one row per cell of every document to ``path`` (UTF-8, RFC 4180 quoting)."""
    items = [docs] if isinstance(docs, Mapping) else list(docs)
    target = Path(path)
    with target.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(csv_rows(items))
    return target


def machine_csv_rows(across: Across, docs: Sequence[Doc], files: Sequence[str | PurePath] = ()) -> list[dict[str, str]]:
    rows = []
    for cell in across.cells:
        for machine, entry in zip(across.machines, cell.entries, strict=True):
            if entry is None:
                continue
            doc = docs[machine.compared]
            metrics = as_mapping(entry.record.get("metrics"))
            source = PurePath(files[machine.compared]).name if machine.compared < len(files) else ""
            rows.append(
                {
                    "cell_id": _text(cell.id),
                    "workload": _text(cell.workload),
                    "unit": _text(cell.unit),
                    "machine": _text(machine.label),
                    "file": _text(source),
                    "run_id": _text((doc.get("run") or {}).get("id")),
                    "status": _text(entry.status),
                    "throughput": _number(entry.throughput),
                    "speedup_vs_baseline": _number(entry.derived.speedup_vs_baseline),
                    "baseline_cell": _text(entry.derived.baseline_id),
                    "peak_memory_bytes": _number(entry.peak_memory_bytes),
                    "memory_kind": _text(metrics.get("memory_kind")),
                    "mfu": _number(entry.derived.mfu),
                    "ratio_to_first": _number(entry.ratio_to_first),
                    "trusted": "true" if entry.derived.trusted else "false",
                    "untrusted_reason": _text(entry.derived.trust_note),
                    "evidence": _text(_evidence(entry.record)),
                }
            )
    return rows


def write_machines_csv(
    across: Across, docs: Sequence[Doc], path: str | Path, files: Sequence[str | PurePath] = ()
) -> Path:
    """Write :data:`MACHINE_COLUMNS` rows of a machines comparison to ``path``."""
    target = Path(path)
    with target.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=MACHINE_COLUMNS)
        writer.writeheader()
        writer.writerows(machine_csv_rows(across, docs, files))
    return target
