"""The page of an ``ampsuite tune`` run: each workload's winner, its ablation as a chart and a table, the search.

It takes the tune summary as plain data (``run.tune`` of the tune results file),
so the report layer needs nothing from :mod:`ampsuite.tune`.
"""

from __future__ import annotations

import importlib.resources
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ampsuite.report import fmt
from ampsuite.report.charts import Bar, bar_chart
from ampsuite.report.render import STATIC_DIR, environment

__all__ = ["PAGE", "render_tune_page", "tune_context"]

PAGE = "tune.html"


def _chart(key: str, rows: list[dict[str, Any]]) -> Any:
    bars = []
    for row in rows:
        speed = row.get("speedup_vs_fp32")
        if speed is None:
            continue
        tone = "good" if row["label"] == "winner" else ("muted" if row["label"] in ("FP32", "TF32") else "normal")
        tip = f"{row['label']}: {' + '.join(row['techniques']) or 'no technique'}"
        tip += f" ({', '.join(row['options'])})" if row["options"] else ""
        bars.append(Bar(label=row["label"], value=float(speed), tooltip=tip, tone=tone))
    return bar_chart(
        bars,
        title=f"{key}: ablation",
        unit="x FP32 throughput",
        fmt=fmt.ratio,
        reference=1.0,
        reference_label="FP32",
    )


def tune_context(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What tune.html shows: the summary with a chart per workload and notes for untrusted rows."""
    workloads = []
    for w in summary.get("workloads") or []:
        rows = [
            {
                **r,
                "note": r.get("reason") or r.get("untrusted") or "",
                "options": r.get("options") or [],  # absent in files of older versions
            }
            for r in w.get("ablation") or []
        ]
        tf32 = next((r for r in rows if r["label"] == "TF32" and r["throughput"] is None), None)
        note = None if tf32 is None else tf32["note"]
        workloads.append({**w, "ablation": rows, "chart": _chart(w["key"], rows), "tf32_note": note})
    return {"summary": summary, "workloads": workloads}


def render_tune_page(summary: Mapping[str, Any], out_dir: str | Path) -> Path:
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
