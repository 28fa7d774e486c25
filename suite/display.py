"""Terminal output while a run goes on: a live progress display on a terminal, one plain line per cell
otherwise. The table at its end is :mod:`ampsuite.summary`'s.

Text a plugin or a file supplies (ids, reasons, messages) reaches the terminal only through
:func:`ampsuite.terminal.plain`, and is printed as text, never as rich markup.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ampsuite.analysis.estimate import Estimate, duration_text, is_compiled
from ampsuite.contract.cell import Cell
from ampsuite.contract.wire import Record, Status
from ampsuite.interrupted import never_ran
from ampsuite.terminal import echo, plain, reader_gone

__all__ = [
    "Display",
    "format_bytes",
    "line_for",
    "make_console",
    "nonfinite_note",
    "time_text",
    "untrusted_note",
]

STATUS_STYLE: dict[str, str] = {
    Status.PASSED: "green",
    Status.SKIPPED: "yellow",
    Status.FAILED: "red",
    Status.OOM: "magenta",
    Status.TIMEOUT: "red",
    Status.CRASHED: "bold red",
    Status.INTERRUPTED: "yellow",
}


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich raises SystemExit(1) here; a closed pipe (`ampsuite show ... | head`) is no error of the command,
        # which goes on with its output discarded (ampsuite.terminal.reader_gone).
        reader_gone(self.file)
        self.quiet = True


def make_console() -> Console:
    """A console that keeps tables readable in CI logs, where rich would assume 80 columns; it never turns
    ``:name:`` in a plugin's text into an emoji. When the reader of its output goes away, it goes quiet."""
    console = _Console(highlight=False, emoji=False)
    if not console.is_terminal:
        # A log keeps each line whole (a path, the command that continues a run): copied or grepped, a line
        # broken at the width would lose its end. Tables still fit the width.
        console = _Console(highlight=False, emoji=False, width=max(console.width, 160), soft_wrap=True)
    return console


def format_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def time_text(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def untrusted_note(record: Mapping[str, Any], target: float) -> str | None:
    """Why a passed cell's step time is not to be trusted (noise above target, unstable, throttled), or None.

    The same rule as the report's and the Markdown summary's "untrusted" mark (analysis.derive).
    """
    from ampsuite import analysis

    if record["status"] != Status.PASSED:
        return None
    own = analysis.noise(cast(Record, record))  # records reach here from the validated results file
    if own is None:
        return "no noise estimate"
    cause = analysis.waiting_note(record)
    if own > target:
        return f"noise above the {target:.1%} target" + (f"; {cause}" if cause else "")
    unstable = analysis.instability_warnings(cast(Record, record))
    return unstable[0] + (f"; {cause}" if cause else "") if unstable else None


def nonfinite_note(record: Mapping[str, Any]) -> str | None:
    numerics = record.get("numerics") or {}
    if numerics.get("nonfinite_step") is None:
        return None
    return f"loss non-finite at step {numerics['nonfinite_step']}"


def line_for(record: Mapping[str, Any], target: float | None = None) -> str:
    """One line that says how a cell ended, with its figure or its evidence.

    With the run's noise target, an untrusted figure is marked (``UNTRUSTED: why``), as is a
    loss that went non-finite.
    """
    status = record["status"]
    if status == Status.PASSED:
        st = record["metrics"]["step_time"]
        unit = record["workload"]["unit"]
        noise = f" +-{st['noise']:.2%}" if st["noise"] is not None else ""
        text = f"{time_text(st['median'])}{noise}  {record['metrics']['throughput']:,.1f} {unit}/s"
        why = untrusted_note(record, target) if target is not None else None
        if why:
            text += f"  UNTRUSTED: {why}"
        bad = nonfinite_note(record)
        return f"{text}  {bad.upper()}" if bad else text
    ev = record.get("evidence") or {}
    if "reason" in ev:
        return str(ev["reason"])
    if "type" in ev:
        # The phase names the technique or probe whose code raised ("apply fp8"), which the message seldom does.
        where = f" in {ev['phase']}" if ev.get("phase") else ""
        return f"{ev['type']}{where}: {ev.get('message', '')}"[:200]
    if status == Status.TIMEOUT:
        return f"no result after {ev.get('timeout_seconds')} s"
    if status == Status.CRASHED and isinstance(ev.get("node"), int):
        return f"node {ev['node']} died (exit code {ev.get('exitcode')}, {ev.get('signal') or 'no signal'})"
    if status == Status.CRASHED:
        return f"worker died (exit code {ev.get('exitcode')}, {ev.get('signal') or 'no signal'})"
    return ""


class Display:
    """Implements the runner's Observer for a terminal or a log."""

    def __init__(
        self,
        console: Console | None = None,
        *,
        live: bool | None = None,
        noise_target: float | None = None,
        measures_peaks: bool = False,
        estimate: Estimate | None = None,
    ) -> None:
        """``noise_target``: the run's, so that progress lines mark untrusted figures;
        ``measures_peaks``: the runner measures (or reads the cached) device peaks before the first cell;
        ``estimate``: the run's cells and their expected wall times, for the time left on each line."""
        self.console = console or make_console()
        self.live = self.console.is_terminal if live is None else live
        self.noise_target = noise_target
        self.measures_peaks = measures_peaks
        self.estimate = estimate
        self.total = 0
        self.started = ""
        self.not_run = 0
        """Cells recorded as interrupted before they ran: counted, not listed (the summary says it once)."""
        self._clock_start = 0.0
        self._progress: Progress | None = None
        self._task: Any = None

    def run_started(self, total: int, path: Path) -> None:
        from ampsuite.results import now

        self.total = total
        self.started = now()
        self._clock_start = time.monotonic()
        self.console.print(plain(f"ampsuite: {total} cells, results in {path}"), markup=False)
        first = "starting"
        if self.measures_peaks:
            # Up to ~10 s when measured (cached per device and torch version): say what the first seconds are.
            # Which it was, measured or cached, the runner says once it knows.
            first = "device peak rates: from the cache, else measured (--no-peaks skips them)"
            if not self.live:
                self.console.print(first, markup=False)
        if self.live:
            self._progress = Progress(
                TextColumn("{task.description}", markup=False),  # cell ids are user text
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[left]}", markup=False),
                console=self.console,
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task(first, total=total, left=self._left())

    def _left(self) -> str:
        """``~5 min 10 s left`` (``+`` when some cells have no estimate yet), or "" without an estimate."""
        if self.estimate is None:
            return ""
        seconds, unknown = self.estimate.remaining()
        if unknown and not seconds:
            return ""
        return f"~{duration_text(seconds)}{'+' if unknown else ''} left"

    def _position(self, index: int) -> str:
        """``12/40``, then the elapsed time and the time left when the run has an estimate."""
        width = len(str(self.total))
        text = f"{index + 1:>{width}}/{self.total}"
        if self.estimate is None:
            return text
        elapsed = duration_text(time.monotonic() - self._clock_start)
        left = self._left()
        return f"{text} {elapsed}" + (f", {left}" if left else "")

    def cell_started(self, index: int, cell: Cell) -> None:
        # The first step of a compiled cell compiles (a minute or more on a GPU): name that phase.
        doing = f"{cell.id} (its first step compiles)" if is_compiled(cell.technique_names) else cell.id
        if self._progress is not None:
            self._progress.update(self._task, description=plain(doing), left=self._left())
        elif is_compiled(cell.technique_names) and self.estimate is not None:
            echo(f"[{self._position(index)}] {doing}")

    def cell_finished(self, index: int, record: Mapping[str, Any]) -> None:
        status = record["status"]
        if self.estimate is not None:
            self.estimate.finished(record)
        if never_ran(record):  # one line for all of them at the end (ampsuite.summary), not one per cell
            self.not_run += 1
            if self._progress is not None:
                self._progress.advance(self._task)
            return
        # A record kept by --resume started before this run did: say so, or it reads as a new measurement.
        resumed = bool(self.started) and str(record.get("started") or "") < self.started
        kept = " (kept from the earlier run)" if resumed else ""
        text = plain(
            f"[{self._position(index)}] {record['id']} {status.upper()}{kept} {line_for(record, self.noise_target)}"
        ).rstrip()
        if self.live:
            self.console.print(text, style=STATUS_STYLE.get(status), markup=False)
            if self._progress is not None:
                self._progress.update(self._task, advance=1, left=self._left())
        else:
            echo(text)

    def message(self, text: str) -> None:
        # Printed above the live progress (as the cells' lines are), which goes on: the device peaks line
        # comes before the first cell.
        self.console.print(plain(text), markup=False)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def dry_run(self, cells: Sequence[Cell]) -> None:
        for cell in cells:
            state = f"SKIP ({cell.skip_reason})" if cell.skip_reason else "run"
            self.console.print(plain(f"{cell.id}  {state}"), markup=False)
        runs = sum(1 for c in cells if not c.skip_reason)
        self.console.print(f"{len(cells)} cells: {runs} to run, {len(cells) - runs} skipped", markup=False)
        if self.estimate is not None:
            self.console.print(self.estimate.describe(), markup=False)
