"""The table that ends a run and ``ampsuite show``: one row per cell, its notes, the counts and the time.

Text a plugin or a file supplies reaches the terminal only through :func:`ampsuite.terminal.plain`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ampsuite.analysis.estimate import duration_text
from ampsuite.contract.wire import Status
from ampsuite.display import (
    STATUS_STYLE,
    format_bytes,
    line_for,
    make_console,
    nonfinite_note,
    time_text,
    untrusted_note,
)
from ampsuite.interrupted import interruption_line, never_ran
from ampsuite.terminal import plain

__all__ = ["print_summary", "results_table"]

_DROP_ORDER = ("peak mem", "scaling", "numerics", "throughput", "vs FP32", "noise", "step time")
"""Columns left out, first to last, when the table is wider than the console; cell and status always stay."""

UNTRUSTED_MARK = "!"


def _row_cells(doc: Mapping[str, Any]) -> tuple[list[str], list[list[str]], list[str]]:
    """Column names, one row of plain text per cell, and the notes printed under the table."""
    from ampsuite import analysis

    derived = analysis.derive(doc)
    target = analysis.noise_target(doc)
    # Data-parallel runs get a scaling column (efficiency against the one-process cell); others keep their table.
    scaling = analysis.data_parallel(doc)
    columns = ["cell", "status", "step time", "noise", "throughput", "vs FP32", "peak mem", "numerics"]
    if scaling:
        columns.insert(6, "scaling")
    rows: list[list[str]] = []
    notes: list[str] = []
    for rec in doc["cells"]:
        if never_ran(rec):  # counted in the summary's interruption line instead
            continue
        d = derived.get(rec["id"])
        if rec["status"] == Status.PASSED:
            m = rec["metrics"]
            st = m["step_time"]
            why = untrusted_note(rec, target)
            noise = f"{st['noise']:.1%}" if st.get("noise") is not None else "-"
            row = [
                rec["id"],
                Status.PASSED.value,
                time_text(st["median"]),
                f"{noise}{UNTRUSTED_MARK}" if why else noise,
                "-" if m.get("throughput") is None else f"{m['throughput']:,.1f} {rec['workload']['unit']}/s",
                f"{d.speedup_vs_fp32:.2f}x" if d and d.speedup_vs_fp32 else "-",
                format_bytes(m.get("peak_memory_bytes")),
                d.numerics_verdict if d else "-",
            ]
            if scaling:
                row.insert(6, f"{d.scaling_efficiency:.1%}" if d and d.scaling_efficiency is not None else "-")
            if why:
                notes.append(f"{UNTRUSTED_MARK} {rec['id']}: untrusted, {why}")
            again = rec.get("remeasured")
            if again:
                notes.append(
                    f"  {rec['id']}: measured again in {again['processes']} processes "
                    f"(first figure {time_text(again['first_median'])}: {again['reason']})"
                )
            bad = nonfinite_note(rec)
            if bad:
                notes.append(f"  {rec['id']}: {bad}")
        else:
            # The reason goes under the table, whole: in a column it wrapped over many rows, or was cut.
            row = [rec["id"], rec["status"], *[""] * (len(columns) - 2)]
            reason = line_for(rec)
            if reason:
                notes.append(f"  {rec['id']} {rec['status']}: {reason}")
        rows.append([plain(c) for c in row])
    return columns, rows, [plain(n) for n in notes]


def _fit(columns: list[str], rows: list[list[str]], width: int) -> list[int]:
    """Indexes of the columns that fit in ``width`` (each column's widest text, rich's padding and borders)."""
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    keep = list(range(len(columns)))

    def total() -> int:
        return sum(widths[i] + 3 for i in keep) + 1

    for name in _DROP_ORDER:
        if total() <= width:
            break
        if name in columns:
            keep.remove(columns.index(name))
    return keep


def results_table(doc: Mapping[str, Any], width: int | None = None) -> Table:
    """The final table: one row per cell, with speedup and numerics where known.

    Ids are never wrapped or cut; at ``width`` (the console's) the least needed columns are
    left out instead, and the caption says which.
    """
    columns, rows, _ = _row_cells(doc)
    keep = _fit(columns, rows, width) if width else list(range(len(columns)))
    dropped = [c for i, c in enumerate(columns) if i not in keep]
    table = Table(
        # User text (suite and device names) is Text, never rich markup.
        title=Text(plain(f"{doc['run']['suite']['name']} on {_device_name(doc)}")),
        caption=f"left out at this width: {', '.join(dropped)} (see the report)" if dropped else None,
        show_lines=False,
    )
    for i in keep:
        col = columns[i]
        table.add_column(
            col,
            justify="left" if col in ("cell", "status", "numerics") else "right",
            no_wrap=col != "numerics",
            min_width=max(len(r[i]) for r in rows) if col == "cell" and rows else None,
        )
    for row in rows:
        style = STATUS_STYLE.get(row[1], "")
        cells = [row[i] for i in keep]
        table.add_row(*[Text(c, style=style) if n == 1 else Text(c) for n, c in enumerate(cells)])
    return table


def _device_name(doc: Mapping[str, Any]) -> str:
    env = doc["environment"]
    gpu = env.get("gpu")
    return gpu["name"] if gpu else f"CPU ({env.get('cpu')})"


def print_summary(doc: Mapping[str, Any], console: Console | None = None) -> None:
    console = console or make_console()
    console.print(results_table(doc, console.width))
    _, _, notes = _row_cells(doc)
    for note in notes:
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    from ampsuite.analysis.quality import quality_lines

    for line in quality_lines(doc):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    counts: dict[str, int] = {}
    for rec in doc["cells"]:
        counts[rec["status"]] = counts.get(rec["status"], 0) + 1
    line = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no cells"
    run = doc.get("run") or {}
    seconds = _run_seconds(run)
    if seconds is not None:
        # a resumed run's start is the last --resume's: the time said is that invocation's, and says so
        since = " since its last --resume" if run.get("resumed") else ""
        line += f" in {duration_text(seconds)}{since}"
    console.print(line, markup=False, soft_wrap=True)
    interrupted = interruption_line(doc)
    if interrupted:
        console.print(plain(interrupted), markup=False, soft_wrap=True)  # one line to copy


def _run_seconds(run: Mapping[str, Any]) -> float | None:
    """Wall time of the latest invocation (since the last ``--resume``, else the start) to ``finished``."""
    import datetime as dt

    resumed = run.get("resumed") or []
    start, end = (resumed[-1] if resumed else run.get("started")), run.get("finished")
    try:
        return (dt.datetime.fromisoformat(str(end)) - dt.datetime.fromisoformat(str(start))).total_seconds()
    except (TypeError, ValueError):
        return None
