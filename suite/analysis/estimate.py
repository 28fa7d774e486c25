"""How long a run will take: each cell's wall time from an earlier run, else from this run's cells of its kind.

A cell's wall time is dominated by what it compiles (torch.compile's first step
can be a minute or more on a GPU), so cells are estimated by kind: compiled or
not. The sources, best first:

1. the same cell id in an earlier results file of the suite (its ``wall_seconds``);
2. the mean wall time of the cells of its kind finished in this run;
3. the mean of the earlier file's cells of its kind.

A cell none of them covers has no estimate, and the total says how many such
cells it leaves out rather than guessing a number.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ampsuite.contract.cell import Cell
from ampsuite.contract.tunerecords import TuneSummary
from ampsuite.contract.wire import Status

__all__ = ["COMPILING", "Estimate", "budget_text", "duration_text", "earlier_walls", "is_compiled"]

COMPILING = frozenset({"torch-compile"})
"""Techniques whose cells spend their first step compiling: a kind of their own for the estimate."""


def is_compiled(technique_names: Iterable[str]) -> bool:
    return not COMPILING.isdisjoint(technique_names)


def duration_text(seconds: float) -> str:
    """``42 s``, ``8 min 50 s``, ``1 h 5 min``: how the terminal states a duration."""
    minutes, rest = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def budget_text(summary: TuneSummary, doc: Mapping[str, Any] | None = None) -> str:
    """``budget 19 min 0 s, used 18 min 1 s``: a tune run's budget and wall time. A results file that ``tune --resume``
    added to holds the last run's, said so: ``the last of 17 runs: budget 25 min 0 s, used 24 min 3 s``."""
    text = f"budget {duration_text(summary.budget_seconds)}, used {duration_text(summary.elapsed_seconds)}"
    runs = summary.runs_of(doc)
    return text if runs == 1 else f"the last of {runs} runs: {text}"


def earlier_walls(doc: Mapping[str, Any] | None) -> dict[str, tuple[bool, float]]:
    """Cell id -> (compiled, wall seconds) of the records of an earlier results document that ran."""
    walls: dict[str, tuple[bool, float]] = {}
    for rec in (doc or {}).get("cells") or []:
        wall = rec.get("wall_seconds")
        if isinstance(wall, int | float) and wall > 0 and rec.get("status") != Status.SKIPPED:
            names = [str(t.get("name")) for t in rec.get("techniques") or [] if isinstance(t, Mapping)]
            walls[str(rec["id"])] = (is_compiled(names), float(wall))
    return walls


@dataclass
class Estimate:
    """The time left in a run of ``cells``, updated as records arrive."""

    cells: Sequence[Cell]
    earlier: Mapping[str, tuple[bool, float]] = field(default_factory=dict)
    source: str | None = None
    """Where ``earlier`` was read (a results file), for the line that states the estimate."""
    _done: set[str] = field(default_factory=set)
    _walls: dict[bool, list[float]] = field(default_factory=lambda: {True: [], False: []})

    def finished(self, record: Mapping[str, Any]) -> None:
        """A record of this run: its cell needs no more time, and its wall time teaches the estimate."""
        self._done.add(str(record["id"]))
        wall = record.get("wall_seconds")
        if isinstance(wall, int | float) and wall > 0 and record.get("status") != Status.SKIPPED:
            names = [str(t.get("name")) for t in record.get("techniques") or [] if isinstance(t, Mapping)]
            self._walls[is_compiled(names)].append(float(wall))

    def _kind_mean(self, compiled: bool) -> float | None:
        if self._walls[compiled]:
            return statistics.fmean(self._walls[compiled])
        earlier = [w for c, w in self.earlier.values() if c == compiled]
        return statistics.fmean(earlier) if earlier else None

    def cell_seconds(self, cell: Cell) -> float | None:
        if cell.skip_reason:
            return 0.0
        if cell.id in self.earlier:
            return self.earlier[cell.id][1]
        return self._kind_mean(is_compiled(cell.technique_names))

    def describe(self) -> str:
        """One line for the end of ``--dry-run``: the estimate for the whole run and what it rests on."""
        seconds, unknown = self.remaining()
        runs = [c for c in self.cells if not c.skip_reason]
        if not runs:
            return "estimate: nothing to run"
        if unknown == len(runs):
            return "estimate: none (no earlier results of this suite to estimate from)"
        known = sum(1 for c in runs if c.id in self.earlier)
        text = f"estimate: {duration_text(seconds)} from {self.source} ({known} of {len(runs)} cells measured there"
        return text + (f"; {unknown} without an estimate)" if unknown else ")")

    def remaining(self) -> tuple[float, int]:
        """(seconds, cells without an estimate) for the cells not finished yet."""
        seconds, unknown = 0.0, 0
        for cell in self.cells:
            if cell.id in self._done:
                continue
            s = self.cell_seconds(cell)
            if s is None:
                unknown += 1
            else:
                seconds += s
        return seconds, unknown
