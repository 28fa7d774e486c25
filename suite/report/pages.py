"""Page contexts of the overview and the workload pages.

Each function returns the plain data one template lays out; a workload page's
charts come from :mod:`ampsuite.report.workload_charts`, its Numerics table
from :mod:`ampsuite.report.numerics`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ampsuite import analysis
from ampsuite.analysis import as_mapping
from ampsuite.analysis.best import SCREEN
from ampsuite.contract.wire import Record, Status
from ampsuite.report.fmt import DASH, bytes_, num, pct
from ampsuite.report.numerics import DIFF_HEADER, numerics_rows
from ampsuite.report.provenance import cudnn_version
from ampsuite.report.views import CellView, Run, cell_view, recipe_text, techniques_text, workload_page_name
from ampsuite.report.workload_charts import workload_charts
from ampsuite.spec.screens import screened_cell

__all__ = ["RATIO_NOTE", "index_context", "speedup_summary", "workload_contexts"]

RATIO_NOTE = (
    "Two ratios are quoted on purpose. \u00d7FP32 holds a cell against the suite's baseline cell of the "
    "same configuration (FP32 storage and FP32 matmuls, with the techniques named above); \u00d7TF32 "
    "against FP32 storage with TF32 Tensor Core "
    "matmuls, which is what most Ampere-or-newer setups already run. Many published \u201cmixed precision "
    "is N\u00d7 faster\u201d figures quote the first; the second is the gain over a well-configured FP32 "
    "baseline. Both are ratios of median step times at the same batch size on the same device."
)


# ---------------------------------------------------------------------------
# overview
# ---------------------------------------------------------------------------


def _environment_rows(run: Run) -> list[tuple[str, str]]:
    env, info = run.env, run.run
    gpu = env.get("gpu") if isinstance(env.get("gpu"), Mapping) else None
    if gpu:
        capability = gpu.get("capability")
        cap = ".".join(str(c) for c in capability) if isinstance(capability, list) else str(capability or DASH)
        gpu_text = f"{gpu.get('name')} \u00d7 {gpu.get('count', 1)}, {bytes_(gpu.get('memory_bytes'))}, sm {cap}"
    else:
        gpu_text = "none (CPU run)"
    suite = as_mapping(info.get("suite"))
    measure = as_mapping(info.get("measure"))
    commit = env.get("ampsuite_commit")
    rows = [
        ("GPU", gpu_text),
        ("NVIDIA driver", str(env.get("driver") or DASH)),
        ("CUDA (driver supports)", str(env.get("cuda_driver") or DASH)),
        ("CUDA (torch build)", str(env.get("torch_cuda") or DASH)),
        ("cuDNN", cudnn_version(env.get("cudnn"))),
        ("PyTorch", str(env.get("torch") or DASH)),
        ("Python", str(env.get("python") or DASH)),
        ("Platform", str(env.get("platform") or DASH)),
        ("Host", f"{env.get('hostname') or DASH}, {env.get('cpu') or DASH} ({env.get('cpu_count') or '?'} CPUs)"),
        ("ampsuite", f"{env.get('ampsuite_version') or DASH}" + (f" ({str(commit)[:12]})" if commit else "")),
        ("Work tree commit", str(env.get("workdir_commit") or DASH)),
        ("Suite", f"{suite.get('name') or DASH} ({suite.get('path') or '?'}, sha256 {str(suite.get('sha256'))[:12]})"),
        ("Baseline combination", str(suite.get("baseline") or DASH)),
        ("Numerics tolerance", pct(suite.get("numerics_tolerance", analysis.DEFAULT_NUMERICS_TOLERANCE))),
        ("Noise target", pct(analysis.noise_target(run.doc)) + ("" if measure else " (default)")),
        ("Started / finished", f"{info.get('started') or DASH} / {info.get('finished') or 'not finished'}"),
        ("Command", " ".join(str(a) for a in info.get("argv") or []) or DASH),
    ]
    return rows


def _peaks(run: Run) -> dict[str, Any] | None:
    peaks = run.env.get("peaks")
    if not isinstance(peaks, Mapping):
        return None
    table = as_mapping(peaks.get("matmul_tflops"))
    return {
        "device": str(peaks.get("device") or DASH),
        "torch": str(peaks.get("torch") or DASH),
        "when": str(peaks.get("measured") or "")
        + (" (from the peaks cache, not re-measured in this run)" if peaks.get("cached") else ""),
        "matmul": [(str(k), num(v)) for k, v in table.items()],
        "copy_gbps": num(peaks.get("copy_gbps")),
    }


def _status_by_workload(run: Run) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, int]] = {}
    for record in run.cells:
        counts = rows.setdefault(analysis.workload_id(record), dict.fromkeys(analysis.STATUSES, 0))
        status = str(record.get("status"))
        counts[status] = counts.get(status, 0) + 1
    return [
        {"workload": w, "page": workload_page_name(w), "counts": [counts.get(s, 0) for s in analysis.STATUSES]}
        for w, counts in rows.items()
    ]


def _best_rows(run: Run) -> list[dict[str, Any]]:
    """One row per workload: its best trustworthy cell (None when there is none), and the faster
    cells passed over with the reason, so no untrustworthy figure is shown as the headline."""
    rows = []
    cells = {r["id"]: r for r in run.cells}
    for workload, best in analysis.best_per_workload(run.doc).items():
        view = None if best.record is None else cell_view(run, best.record)
        # Without a trustworthy cell there is a passed-over one (best_per_workload lists every passed cell).
        unit = (best.record or cells[best.passed_over[0][0]])["workload"]["unit"]
        passed_over = []
        for cell_id, value, why in best.passed_over:
            other = cell_view(run, cells[cell_id])
            passed_over.append(
                {"cell": cell_id, "href": f"{other.page}#{other.anchor}", "throughput": num(value), "reason": why}
            )
        rows.append(
            {
                "workload": workload,
                "page": workload_page_name(analysis.workload_id(best.record or cells[best.passed_over[0][0]])),
                "cell": view,
                "headline": best.headline,
                # What the recipe is, by technique name (the options are on the workload page), for a reader
                # choosing what to adopt; a combination's id alone ("tuned") does not say.
                "recipe": "" if best.record is None else recipe_text(best.record),
                "unit": unit,
                "passed_over": passed_over,
            }
        )
    return rows


def _warning_rows(run: Run) -> list[dict[str, Any]]:
    """One row per distinct warning, with every cell that gave it: the same warning from many cells
    (a misaligned product in every combination of a workload) is read once, not once per cell."""
    rows: dict[str, dict[str, Any]] = {}
    for record in run.cells:
        view = None
        for message in record.get("warnings") or []:
            view = view or cell_view(run, record)
            row = rows.setdefault(str(message), {"message": str(message), "cells": []})
            cell = {"cell": view.id, "href": f"{view.page}#{view.anchor}"}
            if cell not in row["cells"]:
                row["cells"].append(cell)
    return list(rows.values())


def _untrusted_rows(run: Run) -> list[dict[str, str]]:
    rows = []
    for record in run.cells:
        derived = run.derived.get(str(record.get("id")))
        if record["status"] == Status.PASSED and derived is not None and not derived.trusted:
            view = cell_view(run, record)
            rows.append({"cell": view.id, "href": f"{view.page}#{view.anchor}", "message": view.trust_note})
    return rows


def index_context(runs: Sequence[Run]) -> dict[str, Any]:
    run_views = []
    for run in runs:
        counts = analysis.status_counts(run.doc)
        plugins = [
            {k: str(p.get(k) or DASH) for k in ("name", "module", "version", "source")}
            for p in run.run.get("plugins") or []
            if isinstance(p, Mapping)
        ]
        run_views.append(
            {
                "label": run.label,
                "environment": _environment_rows(run),
                "peaks": _peaks(run),
                "plugins": plugins,
                "counts": list(counts.items()),
                "total": sum(counts.values()),
                "by_workload": _status_by_workload(run),
                "best": _best_rows(run),
                "baseline_lines": run.baseline_lines,
                "data_parallel": run.data_parallel,
                "warnings": _warning_rows(run),
                "untrusted": _untrusted_rows(run),
            }
        )
    return {"runs": run_views, "statuses": list(analysis.STATUSES), "ratio_note": RATIO_NOTE}


# ---------------------------------------------------------------------------
# workload pages
# ---------------------------------------------------------------------------


def _batch_key(value: Any) -> tuple[int, float, str]:
    return (0, float(value), "") if isinstance(value, int | float) else (1, 0.0, str(value))


def _grid(views: list[CellView], records: list[Record]) -> dict[str, Any]:
    batches = sorted({r.get("batch_size") for r in records}, key=_batch_key)
    rows: dict[str, dict[str, CellView]] = {}
    for view, record in zip(views, records, strict=True):
        rows.setdefault(view.setup, {})[str(record.get("batch_size"))] = view
    return {
        "batches": [str(b) for b in batches],
        "rows": [
            {"combination": combo, "cells": [cells.get(str(b)) for b in batches]} for combo, cells in rows.items()
        ],
    }


def _numerics_steps(run: Run, records: list[Record]) -> int | None:
    """The numerics phase's step count: the run's ``[measure]``, else (files that predate the key there) the
    longest loss history its cells recorded."""
    steps = as_mapping(as_mapping(run.doc.get("run")).get("measure")).get("numerics_steps")
    if isinstance(steps, int):
        return steps
    return max((len(as_mapping(r.get("numerics")).get("losses") or []) for r in records), default=0) or None


def workload_contexts(runs: Sequence[Run]) -> dict[str, dict[str, Any]]:
    """Per workload id: the context of its page (sections per run and workload options)."""
    pages: dict[str, dict[str, Any]] = {}
    for run in runs:
        # One section per comparable configuration: a workload's precision option (GEMM's dtype)
        # does not split it, so a shape's float32, float16 and bfloat16 cells are read side by side.
        groups: dict[tuple[str, str], list[Record]] = {}
        for record in run.cells:
            options = json.dumps(analysis.comparable_options(record), sort_keys=True)
            groups.setdefault((analysis.workload_id(record), options), []).append(record)
        for (workload_id, options), records in groups.items():
            first = records[0]["workload"]
            unit = first["unit"]
            precision = analysis.precision_option(records[0])
            if precision is not None:
                options += f" (precision option: {precision})"
            views = [cell_view(run, r) for r in records]
            page = pages.setdefault(
                workload_id,
                {"workload": workload_id, "file": workload_page_name(workload_id), "sections": []},
            )
            page["sections"].append(
                {
                    "run": run.label,
                    "plugin": str(first.get("plugin") or DASH),
                    "options": options,
                    "unit": unit,
                    "data_parallel": run.data_parallel,
                    "grid": _grid(views, records),
                    "screens": SCREEN if any(screened_cell(str(r["id"])) for r in records) else "",
                    "cells": views,
                    "charts": workload_charts(run, records, unit),
                    "evidence": [v for v in views if v.evidence is not None],
                    "tensor": [v for v in views if v.tensor_ops],
                    "numerics": numerics_rows(run, records, views),
                    "numerics_steps": _numerics_steps(run, records),
                    "diff_header": DIFF_HEADER,
                    "model_flops": [v for v in views if v.model_tflops != DASH],
                    "techniques": sorted({techniques_text(r) for r in records}),
                }
            )
    return pages


def speedup_summary(cell: CellView) -> str:
    """``3.21x FP32 \u00b7 1.67x TF32`` for compact places."""
    parts = []
    if cell.speedup_fp32 != DASH:
        parts.append(f"{cell.speedup_fp32} FP32")
    if cell.speedup_tf32 != DASH:
        parts.append(f"{cell.speedup_tf32} TF32")
    return " \u00b7 ".join(parts)
