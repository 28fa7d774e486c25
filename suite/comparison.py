"""``ampsuite report --compare`` in the terminal: a table in the manner of ``asv compare``, and the regression gate.

The verdicts are :func:`ampsuite.analysis.compare`'s (noise-aware; the HTML compare page shows the same ones);
this module picks asv's marks for them and the rows worth printing. asv's marks are kept because a reader of
``asv compare`` already knows them: ``+`` slower, ``-`` faster, ``~`` a ratio within the noise, ``!`` failing
now, ``*`` passing now, ``x`` not comparable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ampsuite import analysis
from ampsuite.analysis import AnyDocument, Comparison
from ampsuite.contract.wire import Record, Status
from ampsuite.report.fmt import pct, secs, signed_pct
from ampsuite.terminal import plain

__all__ = ["LEGEND", "Row", "compare_table", "gate_line", "line", "print_comparison", "rows", "summary_line"]

LEGEND = (
    "+ slower, - faster: beyond max(2 x noise, 1%) with the interquartile ranges apart; "
    "~ a ratio within the noise; ! fails now; * passes now; x not comparable"
)

MARK_ORDER = ("+", "!", "-", "*", "x", "~", " ")
"""Rows in this order (regressions first, as on the HTML compare page), matrix order within a mark."""

CHANGED = frozenset("+!-*x")
"""Marks printed without ``--compare-all``: what changed, and what could not be compared."""

STYLES = {"+": "red", "!": "bold red", "-": "green", "*": "green", "x": "yellow"}


@dataclass(frozen=True)
class Row:
    """One cell of the comparison as the terminal shows it."""

    mark: str
    before: str
    after: str
    ratio: str
    cell: str
    note: str
    comparison: Comparison


def _mark(c: Comparison) -> str:
    timed = c.change is not None
    if c.verdict == "regressed":
        return "+" if timed else "!"
    if c.verdict == "improved":
        return "-" if timed else "*"
    if c.verdict == "not comparable":
        return "x"
    if timed and c.threshold is not None and abs(c.change or 0.0) > c.threshold:
        return "~"  # beyond the threshold, but the interquartile ranges overlap
    return " "


def _figure(record: Record | None) -> str:
    if record is None:
        return "n/a"
    median = analysis.median_seconds(record)
    if median is None:
        return str(record["status"])
    noise = analysis.noise(record)
    return secs(median) + ("" if noise is None else f" \u00b1{pct(noise, 2)}")


def _ratio(c: Comparison) -> str:
    if c.change is None:
        return "n/a"
    text = f"{1.0 + c.change:.2f}"
    return f"~{text}" if _mark(c) == "~" else text


def _note(c: Comparison) -> str:
    """Why, where the figures do not say it: a status change, a difference, a cell in one run only."""
    if c.change is not None and c.verdict in ("regressed", "improved"):
        apart = "; measured on two machines" if c.beside is False else ""  # the machines' change as much as the code's
        return f"{signed_pct(c.change, 2)} (threshold {pct(c.threshold, 2)}){apart}"
    if c.change is not None or (c.verdict == "same" and c.a is not None and c.a["status"] == Status.PASSED):
        return ""
    return c.reason


def rows(reference: AnyDocument, doc: AnyDocument) -> list[Row]:
    """Every cell of ``doc`` against ``reference``, regressions first."""
    found = [
        Row(_mark(c), _figure(c.a), _figure(c.b), _ratio(c), c.cell_id, _note(c), c)
        for c in analysis.compare(reference, doc)
    ]
    ranked = sorted(enumerate(found), key=lambda ir: (MARK_ORDER.index(ir[1].mark), ir[0]))
    return [r for _, r in ranked]


def compare_table(table_rows: Sequence[Row]) -> Table:
    """The rows as a table; cell ids and notes are user text, never markup."""
    table = Table(show_lines=False)
    table.add_column("", no_wrap=True)
    for name in ("before", "after", "ratio"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("cell", no_wrap=True)
    table.add_column("note")
    for r in table_rows:
        style = STYLES.get(r.mark, "")
        table.add_row(
            Text(r.mark, style=style),
            r.before,
            r.after,
            Text(r.ratio, style=style),
            Text(plain(r.cell)),
            Text(plain(r.note)),
        )
    return table


def summary_line(all_rows: Sequence[Row], shown: int) -> str:
    """How many cells got slower, faster, ... and how many rows the table left out."""
    counts: dict[str, int] = {}
    for r in all_rows:
        counts[r.comparison.verdict] = counts.get(r.comparison.verdict, 0) + 1
    order = ("regressed", "improved", "not comparable", "missing", "same")
    names = {"missing": "in one run only", "same": "unchanged"}
    parts = [f"{counts[v]} {names.get(v, v)}" for v in order if counts.get(v)]
    hidden = len(all_rows) - shown
    tail = f"; {hidden} unmarked or ~ row{'s' * (hidden != 1)} left out (--compare-all shows them)" if hidden else ""
    return f"{len(all_rows)} cells: {', '.join(parts) or 'none'}{tail}"


def gate_line(failed: Sequence[Comparison], reference: str, min_change: float | None) -> str:
    """The regression gate's verdict, one line."""
    bar = f"the noise and {pct(min_change, 1)}" if min_change else "the noise"
    if not failed:
        return f"no regression against {reference} (beyond {bar})"
    cells = ", ".join(
        c.cell_id + (f" ({signed_pct(c.change, 2)})" if c.change is not None else f" ({c.reason})") for c in failed
    )
    return f"{len(failed)} cell{'s' * (len(failed) != 1)} regressed against {reference} beyond {bar}: {cells}"


def line(console: Console, text: str) -> None:
    """One line as it is: no markup, no highlighting, never wrapped (a CI log is searched by line)."""
    console.print(plain(text), markup=False, highlight=False, soft_wrap=True)


def print_comparison(
    console: Console, reference: AnyDocument, doc: AnyDocument, before: str, after: str, *, everything: bool
) -> list[Row]:
    """Print ``doc`` against ``reference`` (only the changed rows unless ``everything``); returns every row."""
    all_rows = rows(reference, doc)
    shown = [r for r in all_rows if everything or r.mark in CHANGED]
    for name, path, run in (("before", before, reference), ("after", after, doc)):
        line(console, f"{name}: {path} (run {run['run']['id']}, started {run['run']['started']})")
    if shown:
        console.print(compare_table(shown))
        line(console, LEGEND)
    line(console, summary_line(all_rows, len(shown)))
    return all_rows
