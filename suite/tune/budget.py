"""The wall-clock budget of a tune run, and the cost estimates that decide whether a candidate may start."""

from __future__ import annotations

import time
from collections.abc import Callable

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
        self.walls: dict[tuple[str, str], list[float]] = {}
        self.refused = 0
        """Candidates not started because their estimate did not fit."""

    def elapsed(self) -> float:
        return self.clock() - self.start

    def remaining(self) -> float:
        return max(0.0, self.seconds - self.elapsed())

    def record(self, key: tuple[str, str], wall_seconds: float) -> None:
        """Remember a measured cell's wall time under ``key`` (workload configuration, phase)."""
        self.walls.setdefault(key, []).append(wall_seconds)

    def estimate(self, key: tuple[str, str], nominal: float) -> float:
        """Expected wall time of the next cell under ``key``: the largest measured so far (with a margin),
        else ``nominal`` (the measurement's own seconds) plus :data:`STARTUP_SECONDS`."""
        seen = self.walls.get(key)
        if seen:
            return max(seen) * ESTIMATE_MARGIN
        known = [w for ws in self.walls.values() for w in ws]
        # Another phase or workload already paid the fork server's start: only the measurement is left.
        return nominal * ESTIMATE_MARGIN + (1.0 if known else STARTUP_SECONDS)

    def fits(self, estimate: float, reserve: float = 0.0) -> bool:
        """Whether a cell estimated at ``estimate`` seconds may start, keeping ``reserve`` seconds back."""
        return estimate + reserve <= self.remaining()

    def timeout(self, cell_timeout: float) -> float:
        """The timeout to give a cell: the suite's, or what is left of the budget when that is less."""
        return max(0.001, min(cell_timeout, self.remaining()))
