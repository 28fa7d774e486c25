"""The wall-clock budget of a tune run, and the cost estimates that decide whether a candidate may start."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ampsuite.tune.space import AMP

__all__ = ["STARTUP_SECONDS", "Budget"]

STARTUP_SECONDS = 6.0
"""What a first cell costs beyond its measurement (the fork server imports torch once) before any wall time is known."""
ESTIMATE_MARGIN = 1.25
"""Measured wall times vary from cell to cell; an estimate is the largest seen, with this margin."""


class Budget:
    """``seconds`` of wall time from construction, read from ``clock`` (injectable: tests use a fake one).

    A candidate starts only when its estimated cost fits in what is left
    (:meth:`fits`), and its timeout is capped at what is left (:meth:`timeout`),
    so that even a wrong estimate cannot carry the run past the budget by more
    than the time it takes to kill a worker.
    """

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not seconds > 0:
            raise ValueError(f"budget must be > 0 seconds, got {seconds!r}")
        self.seconds = float(seconds)
        self.clock = clock
        self.start = clock()
        self.walls: dict[tuple[str, str], list[_Cost]] = {}
        self.earlier: dict[str, list[_Cost]] = {}
        """First steps of earlier runs (``--resume``), per workload configuration: :meth:`learn`."""
        self.refused = 0
        """Candidates not started because their estimate did not fit."""

    def elapsed(self) -> float:
        return self.clock() - self.start

    def remaining(self) -> float:
        return max(0.0, self.seconds - self.elapsed())

    def record(
        self,
        key: tuple[str, str],
        wall_seconds: float,
        techniques: Iterable[str] = (),
        first_step_seconds: float = 0.0,
        graph: str = "",
    ) -> None:
        """Remember a measured cell's wall time under ``key`` (workload configuration, phase), with its
        techniques, the part of it its first step took (compilation, capture, autotuning) and what it compiled
        (``graph``: its cell id without the phase, "" for none known)."""
        first = min(max(0.0, first_step_seconds), wall_seconds)
        techniques = tuple(techniques)
        cost = _Cost(_kind(techniques), wall_seconds - first, first, "+".join(techniques) or "fp32", graph)
        self.walls.setdefault(key, []).append(cost)

    def learn(self, workload: str, techniques: Iterable[str], first_step_seconds: float) -> None:
        """Remember the first step of a cell of ``workload`` measured in an earlier run (``--resume``): it prices
        first steps as this run's do, and nothing else (the rest of a cell is this run's machine's to say).
        Without it, a resumed call that has compiled nothing yet prices a compiled candidate as an eager one and
        starts it with too little time left."""
        if first_step_seconds > 0:
            techniques = tuple(techniques)
            name = f"{'+'.join(techniques) or 'fp32'} (an earlier run)"
            self.earlier.setdefault(workload, []).append(_Cost(_kind(techniques), 0.0, first_step_seconds, name))

    def estimate(self, key: tuple[str, str], nominal: float, techniques: Iterable[str] = (), graph: str = "") -> float:
        """Expected wall time of the next cell under ``key`` with ``techniques`` (with a margin).

        The rest of a cell (start, warm-up, timed steps, numerics) costs about the same whatever its
        techniques: the largest measured in the same phase (a screen times fewer steps than a full
        measurement), or in any phase of the workload before one of this phase. Its first step is what
        techniques change by minutes (torch.compile of ResNet-50: 157 s on an H200, against 14 s eager),
        and it does not depend on the phase: the largest first step of a measured cell of the workload,
        any phase, whose techniques other than AMP are among the candidate's (a candidate costs at least
        what its most expensive measured part did, and a compile costs about the same in either AMP dtype
        or in FP32), so that an ablation row such as FP32 + compile is not priced as an eager cell. First steps of
        earlier runs (:meth:`learn`) count as this run's. A cell whose ``graph`` this run has measured already
        (a finalist after its screen) finds its compile in inductor's cache: its first step is priced as the
        cheapest seen, of this run or an earlier one. Before any cell of the workload in this run, the rest is
        ``nominal`` (the measurement's own seconds) plus :data:`STARTUP_SECONDS`.
        """
        workload = self._workload(key)
        priced = self._priced(key, techniques, graph)
        first = priced.first if priced else 0.0
        if workload:
            rest = max(c.rest for c in self.walls.get(key) or workload)
            return (rest + first) * ESTIMATE_MARGIN
        # Another workload already paid the fork server's start: only the measurement is left.
        return (nominal + first) * ESTIMATE_MARGIN + (1.0 if any(self.walls.values()) else STARTUP_SECONDS)

    def priced_by(
        self, key: tuple[str, str], techniques: Iterable[str] = (), graph: str = ""
    ) -> tuple[str, float] | None:
        """The measured cell whose first step :meth:`estimate` charges a candidate with ``techniques``, as
        (its techniques joined by "+", seconds), or None when no first step is charged: what a refusal names,
        so that a reader can tell a compile from the rest (and give a candidate whose graph is cached more time)."""
        priced = self._priced(key, techniques, graph)
        return (priced.name, priced.first) if priced and priced.first > 0 else None

    def _priced(self, key: tuple[str, str], techniques: Iterable[str], graph: str = "") -> _Cost | None:
        """The cell, of this run or an earlier one, whose first step a candidate with ``techniques`` is charged."""
        workload = self._workload(key)
        seen = [*workload, *self.earlier.get(key[0], [])]
        if graph and any(c.graph == graph for c in workload):
            # With its graph in inductor's cache a compiled cell's first step is about as long as an eager one's
            # (ResNet-50 on an H200: 11-18 s warm, up to 265 s cold). The cheapest first step seen, of
            # this run or the file's (this run's own may all be compiles).
            cheapest = min(seen, key=lambda c: c.first)
            return _Cost(cheapest.techniques, 0.0, cheapest.first, f"{graph} (compiled earlier in this run)", graph)
        return self._first_step(seen, techniques)

    def _workload(self, key: tuple[str, str]) -> list[_Cost]:
        return [c for (w, _), costs in self.walls.items() if w == key[0] for c in costs]

    @staticmethod
    def _first_step(workload: list[_Cost], techniques: Iterable[str]) -> _Cost | None:
        mine = _kind(techniques)
        return max((c for c in workload if c.techniques <= mine), key=lambda c: c.first, default=None)

    def fits(self, estimate: float, reserve: float = 0.0) -> bool:
        """Whether a cell estimated at ``estimate`` seconds may start, keeping ``reserve`` seconds back."""
        return estimate + reserve <= self.remaining()

    def timeout(self, cell_timeout: float) -> float:
        """The timeout to give a cell: the suite's, or what is left of the budget when that is less."""
        return max(0.001, min(cell_timeout, self.remaining()))


@dataclass(frozen=True)
class _Cost:
    techniques: frozenset[str]
    rest: float
    """Wall seconds beyond the first step."""
    first: float
    """Seconds of the first step."""
    name: str
    """The measured cell's techniques, joined by "+" ("fp32" for none)."""
    graph: str = ""
    """What the cell compiled: its id without the phase ("" when not known)."""


def _kind(techniques: Iterable[str]) -> frozenset[str]:
    """The techniques as a first step's cost sees them: without AMP, which changes a graph's dtypes, not its size."""
    return frozenset(t for t in techniques if t not in AMP)
