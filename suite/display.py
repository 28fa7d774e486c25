"""Terminal output: a live progress display on a terminal, one plain line per cell otherwise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from suite.contract.wire import Cell

__all__ = ["Display", "format_bytes", "line_for", "results_table"]

STATUS_STYLE = {
    "passed": "green",
    "skipped": "yellow",
    "failed": "red",
    "oom": "magenta",
    "timeout": "red",
    "crashed": "bold red",
    "interrupted": "yellow",
}


def make_console() -> Console:
    """A console that keeps tables readable in CI logs, where rich would assume 80 columns."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=max(console.width, 160))
    return console


def format_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def line_for(record: Mapping[str, Any]) -> str:
    """One line that says how a cell ended, with its figure or its evidence."""
    status = record["status"]
    if status == "passed":
        st = record["metrics"]["step_time"]
        unit = record["workload"]["unit"]
        return (
            f"{_time(st['median'])} +-{st['noise']:.2%}  {record['metrics']['throughput']:,.1f} {unit}/s"
            if st["noise"] is not None
            else f"{_time(st['median'])}  {record['metrics']['throughput']:,.1f} {unit}/s"
        )
    ev = record.get("evidence") or {}
    if "reason" in ev:
        return str(ev["reason"])
    if "type" in ev:
        return f"{ev['type']}: {ev.get('message', '')}"[:200]
    if status == "timeout":
        return f"no result after {ev.get('timeout_seconds')} s"
    if status == "crashed":
        return f"worker died (exit code {ev.get('exitcode')}, {ev.get('signal') or 'no signal'})"
    return ""


class Display:
    """Implements the runner's Observer for a terminal or a log."""

    def __init__(self, console: Console | None = None, *, live: bool | None = None) -> None:
        self.console = console or make_console()
        self.live = self.console.is_terminal if live is None else live
        self.total = 0
        self._progress: Progress | None = None
        self._task: Any = None

    def run_started(self, total: int, path: Path) -> None:
        self.total = total
        self.console.print(f"ampsuite: {total} cells, results in {path}", markup=False)
        if self.live:
            self._progress = Progress(
                TextColumn("{task.description}", markup=False),  # cell ids are user text
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task("starting", total=total)

    def cell_started(self, index: int, cell: Cell) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=cell.id)

    def cell_finished(self, index: int, record: Mapping[str, Any]) -> None:
        status = record["status"]
        width = len(str(self.total))
        text = f"[{index + 1:>{width}}/{self.total}] {record['id']} {status.upper()} {line_for(record)}"
        if self.live:
            self.console.print(text, style=STATUS_STYLE.get(status), markup=False)
            if self._progress is not None:
                self._progress.advance(self._task)
        else:
            print(text, flush=True)

    def message(self, text: str) -> None:
        self.stop()
        self.console.print(text, markup=False)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def dry_run(self, cells: Sequence[Cell]) -> None:
        for cell in cells:
            state = f"SKIP ({cell.skip_reason})" if cell.skip_reason else "run"
            self.console.print(f"{cell.id}  {state}", markup=False)
        runs = sum(1 for c in cells if not c.skip_reason)
        self.console.print(f"{len(cells)} cells: {runs} to run, {len(cells) - runs} skipped", markup=False)


def results_table(doc: Mapping[str, Any]) -> Table:
    """The final table: one row per cell, with speedup and numerics where known."""
    from suite import analysis

    derived = analysis.derive(doc)
    # Data-parallel runs get a scaling column (efficiency against the one-process cell); others keep their table.
    scaling = analysis.data_parallel(doc)
    # Every string is user or plugin text (ids, names, error messages): Text, never rich markup.
    table = Table(title=Text(f"{doc['run']['suite']['name']} on {_device_name(doc)}"), show_lines=False)
    columns = ["cell", "status", "step time", "noise", "throughput", "vs FP32", "peak mem", "numerics"]
    if scaling:
        columns.insert(6, "scaling")
    for col in columns:
        table.add_column(col, justify="left" if col in ("cell", "status", "numerics") else "right")
    for rec in doc["cells"]:
        d = derived.get(rec["id"])
        if rec["status"] == "passed":
            m = rec["metrics"]
            st = m["step_time"]
            row = [
                rec["id"],
                Text(rec["status"], style=STATUS_STYLE["passed"]),
                _time(st["median"]),
                f"{st['noise']:.1%}" if st.get("noise") is not None else "-",
                f"{m['throughput']:,.1f} {rec['workload']['unit']}/s",
                f"{d.speedup_vs_fp32:.2f}x" if d and d.speedup_vs_fp32 else "-",
                format_bytes(m.get("peak_memory_bytes")),
                d.numerics_verdict if d else "-",
            ]
            if scaling:
                row.insert(6, f"{d.scaling_efficiency:.1%}" if d and d.scaling_efficiency is not None else "-")
            table.add_row(*(Text(c) if isinstance(c, str) else c for c in row))
        else:
            style = STATUS_STYLE.get(rec["status"], "")
            blanks = [""] * (len(columns) - 3)
            table.add_row(Text(rec["id"]), Text(rec["status"], style=style), *blanks, Text(line_for(rec)[:60]))
    return table


def _device_name(doc: Mapping[str, Any]) -> str:
    env = doc["environment"]
    gpu = env.get("gpu")
    return gpu["name"] if gpu else f"CPU ({env.get('cpu')})"


def print_summary(doc: Mapping[str, Any], console: Console | None = None) -> None:
    console = console or make_console()
    console.print(results_table(doc))
    counts: dict[str, int] = {}
    for rec in doc["cells"]:
        counts[rec["status"]] = counts.get(rec["status"], 0) + 1
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()) or "no cells", markup=False)
