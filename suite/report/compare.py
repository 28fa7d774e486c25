"""The compare page: each reported run against a reference run, cell by cell.

The verdicts come from :func:`ampsuite.analysis.compare` (noise-aware, and
"not comparable" when the configuration differs); this module only orders
and formats them. Regressions come first because they are what a reader
of a comparison is looking for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ampsuite import analysis
from ampsuite.analysis import AnyDocument as Doc
from ampsuite.analysis import Comparison
from ampsuite.contract.wire import Status
from ampsuite.report import charts
from ampsuite.report.fmt import DASH, num, pct, signed_pct
from ampsuite.report.views import Run, cell_anchor, run_label, workload_page_name

__all__ = ["VERDICT_ORDER", "compare_context", "comparison_rows", "summary"]

VERDICT_ORDER = ("regressed", "improved", "not comparable", "missing", "not measured", "same")
NOT_MEASURED = "not measured"
"""A cell that ran in neither run (skipped, failed, ... in both): nothing was compared, so not "same"."""


def _href(run: Run, comparison: Comparison) -> str:
    if comparison.b is None:
        return ""
    workload = analysis.workload_id(comparison.b)
    return f"{workload_page_name(workload)}#{cell_anchor(run.index, comparison.cell_id)}"


def _not_measured(c: Comparison) -> Comparison:
    passed = [r is not None and r.get("status") == Status.PASSED for r in (c.a, c.b)]
    if c.verdict == "same" and not any(passed):
        return dataclasses.replace(c, verdict=NOT_MEASURED)  # type: ignore[arg-type]
    return c


def comparison_rows(run: Run, reference: Doc) -> list[dict[str, Any]]:
    """Rows of one run's comparison, regressions first, then matrix order."""
    comparisons = [_not_measured(c) for c in analysis.compare(reference, run.doc)]
    ranked = sorted(enumerate(comparisons), key=lambda ic: (VERDICT_ORDER.index(ic[1].verdict), ic[0]))
    rows = []
    for _, c in ranked:
        record = c.b if c.b is not None else c.a
        unit = "samples" if record is None else record["workload"]["unit"]
        rows.append(
            {
                "cell": c.cell_id,
                "href": _href(run, c),
                "status_a": str(c.a.get("status")) if c.a is not None else "",
                "status_b": str(c.b.get("status")) if c.b is not None else "",
                "a": num(analysis.throughput(c.a)) if c.a is not None else DASH,
                "b": num(analysis.throughput(c.b)) if c.b is not None else DASH,
                "unit": unit,
                "change": signed_pct(c.change),
                "change_value": c.change if c.change is not None and c.verdict not in ("not comparable",) else None,
                "threshold": pct(c.threshold),
                "verdict": c.verdict,
                "reason": c.reason,
            }
        )
    return rows


def compare_context(runs: Sequence[Run], reference: Doc) -> dict[str, Any]:
    sections = []
    for run in runs:
        rows = comparison_rows(run, reference)
        counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in VERDICT_ORDER}
        sections.append({"run": run.label, "rows": rows, "counts": list(counts.items()), "chart": _chart(rows)})
    return {"reference": run_label(reference), "sections": sections, "rule": RULE}


TONES = {"regressed": "bad", "improved": "good"}


def _chart(rows: Sequence[dict[str, Any]]) -> Any:
    """Step-time change of every cell measured in both runs, in the table's order (regressions first)."""
    bars = [
        charts.Bar(
            r["cell"],
            r["change_value"] * 100,
            f"{r['cell']}: {r['change']} ({r['verdict']})",
            tone=TONES.get(r["verdict"], "muted"),
        )
        for r in rows
        if r["change_value"] is not None
    ]
    return charts.bar_chart(
        bars, title="Step time change against the reference (%, positive is slower)", unit="%", reference=0.0
    )


def summary(runs: Sequence[Run], reference: Doc) -> list[dict[str, Any]]:
    """For the overview: per run, how many cells regressed, improved, ... against the reference."""
    out = []
    for run in runs:
        rows = comparison_rows(run, reference)
        counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in VERDICT_ORDER}
        out.append({"run": run.label, "counts": list(counts.items()), "regressed": counts["regressed"]})
    return out


RULE = (
    "A cell counts as improved or regressed only when its median step time changed by more than "
    f"max(2 \u00d7 noise of either run, {analysis.MIN_RELATIVE_CHANGE:.0%}) and the two interquartile ranges "
    "of its step times do not overlap. Cells whose batch size, device, workload options, techniques, matmul "
    "dtype or GPU differ are not comparable. A cell that passed before and now fails, runs out of memory, "
    "times out or crashes is a regression."
)
