"""The quality page (quality.html): verdicts, eval-loss curves, time-to-target, speed beside.

Everything comes from :mod:`ampsuite.analysis.quality`; this module only lays
it out, per run and workload configuration: each cell's verdict against its
reference with the statistic behind it, its time-to-target, its speed beside,
and the eval loss of every seed of every recipe over the training steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ampsuite import analysis
from ampsuite.analysis.quality import QualityRule, QualityVerdict, target_text
from ampsuite.contract.wire import Record
from ampsuite.report.charts import Series, line_chart
from ampsuite.report.fmt import DASH, num, ratio, signed_pct
from ampsuite.report.views import Run, run_label

__all__ = ["quality_context"]


def _figure(value: float | None, digits: int = 4) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def _row(
    record: Record,
    verdict: QualityVerdict,
    rule: QualityRule,
    derived: analysis.Derived | None,
    names: Mapping[str, str],
) -> dict[str, Any]:
    target = rule.targets.get(str(record["workload"]["id"]))
    return {
        "cell": record["id"],
        "recipe": names[record["id"]],
        "verdict": verdict.verdict,
        "reason": verdict.reason,
        "loss": _figure(verdict.mean) + ("" if verdict.std is None else f" \u00b1 {verdict.std:.4f}"),
        "seeds": verdict.seeds,
        "accuracy": DASH if verdict.accuracy is None else f"{verdict.accuracy:.2%}",
        "reference": DASH if verdict.reference is None else names.get(verdict.reference, verdict.reference),
        "reference_id": verdict.reference or "",
        "rel_diff": DASH if verdict.rel_diff is None else signed_pct(verdict.rel_diff, 2),
        "t": DASH if verdict.t is None else f"{verdict.t:.2f}",
        "df": DASH if verdict.df is None else f"{verdict.df:.1f}",
        "p": DASH if verdict.p is None else f"{verdict.p:.3g}",
        "target": target_text(verdict, target) or DASH,
        "throughput": f"{num(analysis.throughput(record))} {record['workload']['unit']}/s",
        "speedup": ratio(None if derived is None else derived.speedup_vs_fp32),
        "status": str(record.get("status")),
        "trusted": derived is not None and derived.trusted,
        "trust_note": "" if derived is None else derived.trust_note or "",
        "power_cap": analysis.power_cap_note(record) or "",
    }


def _chart(records: Sequence[Record], title: str) -> Any:
    """Every seed's eval loss over the training steps, one line per recipe and seed."""
    steps: list[int] = []
    series = []
    for record in records:
        for run in record["quality"]["runs"] if "quality" in record else []:
            curve = run["curve"]
            steps += [s for s in curve["steps"] if s not in steps]
            points = [(str(s), v) for s, v in zip(curve["steps"], curve["eval_loss"], strict=True) if v is not None]
            series.append(Series(f"{record.get('combination')} seed {run['seed']}", points))
    return line_chart(
        [str(s) for s in sorted(steps)], series, title=title, x_label="step", y_label="eval loss", from_zero=False
    )


def _groups(run: Run, verdicts: Mapping[str, QualityVerdict]) -> dict[str, list[Record]]:
    """The judged cells of ``run`` per workload configuration (the part of a cell id before the combination)."""
    groups: dict[str, list[Record]] = {}
    for record in run.cells:
        if record["id"] in verdicts:
            key = f"{record['workload']['id']}/bs{record['batch_size']}"
            groups.setdefault(key, []).append(record)
    return groups


def quality_context(runs: Sequence[Run]) -> dict[str, Any] | None:
    """quality.html's context, or None when no run holds quality runs."""
    sections = []
    for run in runs:
        rule, verdicts = analysis.quality_rule(run.doc), analysis.quality_verdicts(run.doc)
        if rule is None or not verdicts:
            continue
        for key, records in _groups(run, verdicts).items():
            # A section is one workload configuration, so a row is named by its combination alone (the whole cell
            # id is its tooltip); the table then fits the page without a scrollbar.
            names = {str(r["id"]): str(r.get("combination") or r["id"]) for r in records}
            rows = [_row(r, verdicts[r["id"]], rule, run.derived.get(r["id"]), names) for r in records]
            sections.append(
                {
                    "run": run_label(run.doc),
                    "title": key,
                    "rows": rows,
                    "speedup": any(r["speedup"] != DASH for r in rows),
                    "chart": _chart(records, f"{key}: eval loss per recipe and seed"),
                    "rule": rule.describe(),
                }
            )
    return {"sections": sections} if sections else None
