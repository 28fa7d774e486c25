"""The Markdown summary: what a pull-request comment needs from a run.

Best combination per workload with both speedup ratios, status counts, the
regressions against a reference run when one is given, the same cells side
by side when the runs come from several machines, and the plugins' Markdown
sections. Every piece of text from the results is escaped, since
cell and plugin names are arbitrary and the comment is rendered as HTML.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ampsuite import ReportSection, analysis
from ampsuite.analysis import AnyDocument as Doc
from ampsuite.analysis.quality import statistic_text, target_text
from ampsuite.contract.wire import Status
from ampsuite.report.fmt import DASH, num, pct, ratio, signed_pct
from ampsuite.report.views import recipe_text, run_label

__all__ = ["escape_md", "markdown_summary"]

_MD_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|", "`": "\\`", "*": "\\*", "_": "\\_", "[": "\\["}


def escape_md(text: object) -> str:
    """Text safe inside a Markdown table cell: no HTML, no pipes, no emphasis, one line."""
    out = "".join(_MD_ESCAPES.get(ch, ch) for ch in str(text))
    return " ".join(out.split())


def _as_docs(docs: Doc | Sequence[Doc]) -> list[Doc]:
    return [docs] if isinstance(docs, Mapping) else list(docs)


def _run_part(doc: Doc, compare_with: Doc | None) -> list[str]:
    lines = [f"### {escape_md(run_label(doc))}", ""]
    counts = analysis.status_counts(doc)
    lines.append("**Cells:** " + ", ".join(f"{n} {escape_md(s)}" for s, n in counts.items() if n) + "")
    lines.append("")
    best = analysis.best_per_workload(doc)
    # Data-parallel runs get a scaling column (efficiency against the one-process cell); others keep their table.
    scaling = analysis.data_parallel(doc)
    if best:
        lines += [
            "| workload | best cell | batch | throughput | \u00d7FP32 | \u00d7TF32 | memory saving | "
            + ("scaling | " if scaling else "")
            + "numerics |",
            "|---|---|---:|---:|---:|---:|---:|" + ("---:|" if scaling else "") + "---|",
        ]
        passed_over: list[str] = []
        for workload, b in best.items():
            passed_over += [
                f"- {escape_md(workload)}: {escape_md(cell_id)} ({num(value)}/s): {escape_md(why)}"
                for cell_id, value, why in b.passed_over
            ]
            if b.record is None or b.derived is None:
                blanks = "| " * (6 + scaling)
                lines.append(f"| {escape_md(workload)} | no trustworthy cell {blanks}|")
                continue
            d = b.derived
            headline = f"{escape_md(b.headline)}; fastest trustworthy: " if b.headline else ""
            recipe = recipe_text(b.record)
            recipe = f" ({escape_md(recipe)})" if recipe else ""
            lines.append(
                f"| {escape_md(workload)} | {headline}{escape_md(b.record['id'])}{recipe} "
                f"| {escape_md(b.record['batch_size'])} "
                f"| {num(analysis.throughput(b.record))} {escape_md(b.record['workload']['unit'])}/s "
                f"| {ratio(d.speedup_vs_fp32)} | {ratio(d.speedup_vs_tf32)} "
                f"| {pct(d.memory_saving)} "
                + (f"| {pct(d.scaling_efficiency)} " if scaling else "")
                + f"| {escape_md(d.numerics_verdict)} |"
            )
        lines += ["", " ".join(analysis.baseline_lines(doc)) or "\u00d7FP32: against FP32; \u00d7TF32: against TF32."]
        if scaling:
            lines[-1] += (
                " Scaling: total throughput of a data-parallel cell / (GPUs \u00d7 throughput of the"
                " one-process cell of the same configuration); batch is per GPU."
            )
        lines.append("")
        if passed_over:
            lines += ["**Faster cells passed over (not trustworthy):**", "", *passed_over, ""]
    derived = analysis.derive(doc)
    untrusted = [r for r in doc["cells"] if r["status"] == Status.PASSED and not derived[r["id"]].trusted]
    if untrusted:
        notes = (f"{escape_md(r['id'])} ({escape_md(derived[r['id']].trust_note)})" for r in untrusted)
        lines += ["**Figures not trusted:** " + "; ".join(notes), ""]
    lines += _quality_part(doc)
    broken = [r for r in doc["cells"] if r["status"] in analysis.FAILURE_STATUSES]
    if broken:
        lines.append("**Did not pass:** " + ", ".join(f"{escape_md(r.get('id'))} ({r.get('status')})" for r in broken))
        lines.append("")
    if compare_with is not None:
        comparisons = analysis.compare(compare_with, doc)
        regressions = [c for c in comparisons if c.verdict == "regressed"]
        improved = sum(1 for c in comparisons if c.verdict == "improved")
        lines.append(
            f"**Against {escape_md(run_label(compare_with))}:** {len(regressions)} regressed, {improved} improved, "
            f"{sum(1 for c in comparisons if c.verdict == 'not comparable')} not comparable."
        )
        lines.append("")
        if regressions:
            lines += ["| regressed cell | step time change | threshold | why |", "|---|---:|---:|---|"]
            for c in regressions:
                change = signed_pct(c.change) if c.change is not None else DASH
                lines.append(f"| {escape_md(c.cell_id)} | {change} | {pct(c.threshold)} | {escape_md(c.reason)} |")
            lines.append("")
    return lines


def _machines_part(items: Sequence[Doc]) -> list[str]:
    """The same cells on several machines (as machines.html): throughput, x baseline, x first machine."""
    across = analysis.across_machines(items)
    if len(across.machines) < 2 or not across.cells:
        return []
    first = across.machines[0].label
    lines = [
        f"### Machines: {', '.join(escape_md(m.label) for m in across.machines)}",
        "",
        f"| cell | machine | status | throughput | \u00d7baseline | \u00d7{escape_md(first)} |",
        "|---|---|---|---:|---:|---:|",
    ]
    for cell in across.cells:
        for machine, entry in zip(across.machines, cell.entries, strict=True):
            if entry is None:
                continue
            figure = f"{num(entry.throughput)} {escape_md(cell.unit)}/s" if entry.throughput is not None else DASH
            if entry.throughput is not None and not entry.derived.trusted:
                figure += " (untrusted)"  # why: under "Figures not trusted" of that machine's run
            lines.append(
                f"| {escape_md(cell.id)} | {escape_md(machine.label)} | {escape_md(entry.status)} | {figure} "
                f"| {ratio(entry.derived.speedup_vs_baseline)} | {ratio(entry.ratio_to_first)} |"
            )
    return [*lines, ""]


def markdown_summary(
    docs: Doc | Sequence[Doc],
    compare_with: Doc | None = None,
    *,
    extra_sections: Iterable[ReportSection] = (),
) -> str:
    """A Markdown summary of one or more runs (for a pull-request comment)."""
    lines = ["## ampsuite results", ""]
    items = _as_docs(docs)
    for doc in items:
        lines += _run_part(doc, compare_with)
    if len(items) > 1:
        lines += _machines_part(items)
    for section in extra_sections:
        if section.markdown:
            lines += [f"### {escape_md(section.title)}", "", section.markdown.rstrip(), ""]
    return "\n".join(lines).rstrip() + "\n"


def _quality_part(doc: Doc) -> list[str]:
    """summary.md's quality table of one run (no lines without quality runs)."""
    rule, verdicts = analysis.quality_rule(doc), analysis.quality_verdicts(doc)
    if rule is None or not verdicts:
        return []
    lines = [
        f"**Quality** ({escape_md(rule.describe())}):",
        "",
        "| cell | verdict | final eval loss | time-to-target |",
        "|---|---|---|---|",
    ]
    cells = {r["id"]: r for r in doc["cells"]}
    for cell_id, v in verdicts.items():
        target = rule.targets.get(str(cells[cell_id]["workload"]["id"]))
        detail = v.reason if v.verdict in ("diverged", "n/a") else statistic_text(v)
        lines.append(
            f"| {escape_md(cell_id)} | {escape_md(v.verdict)} | {escape_md(detail)} "
            f"| {escape_md(target_text(v, target) or DASH)} |"
        )
    return [*lines, ""]
