"""The page of an ``ampsuite tune`` run: each workload's winner, its ablation as a chart and a table, the search.

It renders the tune summary's records (:mod:`ampsuite.contract.tunerecords`), or their JSON (``run.tune`` of
the tune results file, of this version or an earlier one), so the report layer needs nothing from
:mod:`ampsuite.tune`, and no torch. Given the results document as well (or finding ``results.json`` beside the
page), the header names the machine (:func:`ampsuite.analysis.provenance_line`, as every report page and tune.md
do) and splits the file's records into those measured in this run, kept from an earlier one and pruned
(:meth:`TuneSummary.counts`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from ampsuite.analysis.estimate import budget_text
from ampsuite.contract.tunerecords import AblationRow, RowKind, TuneSummary
from ampsuite.report import fmt
from ampsuite.report.charts import Bar, bar_chart

__all__ = ["PAGE", "RESULTS", "SitePage", "has_tune", "site_pages", "tune_context"]

PAGE = "tune.html"
RESULTS = "results.json"
"""The tune results file, which ``ampsuite tune`` writes beside the page."""
BESIDE = (("recipe", "recipe.toml"), ("results", RESULTS))
"""What the standalone page links to: the files ``ampsuite tune`` writes beside it."""

_TONES = {RowKind.WINNER: "good", RowKind.FP32: "muted", RowKind.TF32: "muted"}


def _chart(key: str, rows: Sequence[AblationRow]) -> Markup:
    bars = []
    for row in rows:
        if row.speedup_vs_fp32 is None:
            continue
        tip = f"{row.label}: {' + '.join(row.techniques) or 'no technique'}"
        tip += f" ({', '.join(row.options)})" if row.options else ""
        bars.append(Bar(label=row.label, value=row.speedup_vs_fp32, tooltip=tip, tone=_TONES.get(row.kind, "normal")))
    return bar_chart(
        bars, title=f"{key}: ablation", unit="x FP32 throughput", fmt=fmt.ratio, reference=1.0, reference_label="FP32"
    )


def tune_context(
    summary: TuneSummary | Mapping[str, Any],
    doc: Mapping[str, Any] | None = None,
    links: Sequence[tuple[str, str]] = BESIDE,
) -> dict[str, Any]:
    """What tune.html shows: the header's lines, the summary, and per workload its record, a chart, why TF32 has
    no figure and each step's decision in words. ``summary`` is the record, its JSON or the whole results document;
    ``doc``, the results document, names the machine and the pruned cells; ``links``, the files the page links
    to as (what, file name): those ``ampsuite tune`` writes beside it, by default."""
    record, doc = TuneSummary.with_document(summary, doc)
    workloads = []
    for w in record.workloads:
        tf32 = next((r for r in w.ablation if r.kind is RowKind.TF32 and r.throughput is None), None)
        workloads.append(
            {
                "w": w,
                "chart": _chart(w.key, w.ablation),
                "tf32_note": None if tf32 is None else tf32.note,
            }
        )
    return {
        "summary": record,
        "time": budget_text(record, doc),
        "counts": record.counts(None if doc is None else doc.get("cells") or []),
        "workloads": workloads,
        "links": list(links),
    }


def has_tune(doc: Mapping[str, Any]) -> bool:
    """Whether the results document is a tune search's (its ``run.tune`` holds the summary)."""
    run = doc.get("run")
    return isinstance(run, Mapping) and isinstance(run.get("tune"), Mapping)


@dataclass(frozen=True)
class SitePage:
    """A tune search's page in a report site."""

    index: int
    """The document's position among the site's."""
    file: str
    """``tune.html`` for the first tune search, ``tune-2.html``, ... for the others."""
    searched: str
    """The workloads searched, ``resnet50`` or ``bert-base, vit-b16``."""

    @property
    def label(self) -> str:
        """What the navigation and the page's title call it: ``Tune: resnet50``."""
        return f"Tune: {self.searched}" if self.searched else "Tune"


def site_pages(docs: Sequence[Mapping[str, Any]]) -> list[SitePage]:
    """The tune pages of a report site, one per tune search among ``docs``."""
    pages: list[SitePage] = []
    for i, doc in enumerate(docs):
        if has_tune(doc):
            keys = ", ".join(w.key for w in TuneSummary.with_document(doc)[0].workloads)
            name = PAGE if not pages else f"tune-{len(pages) + 1}.html"
            pages.append(SitePage(i, name, keys))
    return pages
