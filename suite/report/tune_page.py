"""The page of an ``ampsuite tune`` run: each workload's winner, its ablation as a chart and a table, the search.

It renders the tune summary's records (:mod:`ampsuite.contract.tunerecords`), or their JSON (``run.tune`` of
the tune results file, of this version or an earlier one), so the report layer needs nothing from
:mod:`ampsuite.tune`, and no torch.
"""

from __future__ import annotations

import importlib.resources
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ampsuite.contract.tunerecords import AblationRow, RowKind, TuneSummary
from ampsuite.report import fmt
from ampsuite.report.charts import Bar, bar_chart
from ampsuite.report.render import STATIC_DIR, environment

__all__ = ["PAGE", "render_tune_page", "tune_context"]

PAGE = "tune.html"

_TONES = {RowKind.WINNER: "good", RowKind.FP32: "muted", RowKind.TF32: "muted"}


def _chart(key: str, rows: Sequence[AblationRow]) -> Any:
    bars = []
    for row in rows:
        if row.speedup_vs_fp32 is None:
            continue
        tip = f"{row.label}: {' + '.join(row.techniques) or 'no technique'}"
        tip += f" ({', '.join(row.options)})" if row.options else ""
        bars.append(Bar(label=row.label, value=row.speedup_vs_fp32, tooltip=tip, tone=_TONES.get(row.kind, "normal")))
    return bar_chart(
        bars,
        title=f"{key}: ablation",
        unit="x FP32 throughput",
        fmt=fmt.ratio,
        reference=1.0,
        reference_label="FP32",
    )


def tune_context(summary: TuneSummary | Mapping[str, Any]) -> dict[str, Any]:
    """What tune.html shows: the summary, and per workload its record, a chart and why TF32 has no figure."""
    summary = TuneSummary.of(summary)
    workloads = []
    for w in summary.workloads:
        tf32 = next((r for r in w.ablation if r.kind is RowKind.TF32 and r.throughput is None), None)
        workloads.append({"w": w, "chart": _chart(w.key, w.ablation), "tf32_note": None if tf32 is None else tf32.note})
    return {"summary": summary, "workloads": workloads}


def render_tune_page(summary: TuneSummary | Mapping[str, Any], out_dir: str | Path) -> Path:
    """Write tune.html (and the report's stylesheet) into ``out_dir``; returns the page's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    html = environment().get_template(PAGE).render(**tune_context(summary))
    path = out / PAGE
    path.write_text(html, encoding="utf-8")
    target = out / STATIC_DIR
    target.mkdir(exist_ok=True)
    source = importlib.resources.files("ampsuite.report") / STATIC_DIR
    for item in source.iterdir():
        if item.is_file():
            with importlib.resources.as_file(item) as file:
                shutil.copyfile(file, target / item.name)
    return path
