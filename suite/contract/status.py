"""A cell's status: the one spelling of every status, and the subsets the runner and the reports use.

Apart from :mod:`ampsuite.contract.wire`, which re-exports it, so that the records that hold a status (tune's
ablation rows among them) and the wire format that holds those records need not import each other.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["FAILURES", "NOT_RUN", "ORDER", "TERMINAL", "WORKER_STATUSES", "Status"]


class Status(StrEnum):
    """A cell's status. A ``StrEnum``: it is written to JSON as its value and equals it."""

    PASSED = "passed"
    SKIPPED = "skipped"
    FAILED = "failed"
    OOM = "oom"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    INTERRUPTED = "interrupted"


ORDER: tuple[Status, ...] = tuple(Status)
"""Every status, in the order reports list them."""
TERMINAL: frozenset[Status] = frozenset(Status) - {Status.INTERRUPTED}
"""Statuses that ``--resume`` keeps; interrupted cells run again."""
FAILURES: frozenset[Status] = frozenset({Status.FAILED, Status.OOM, Status.TIMEOUT, Status.CRASHED})
"""Statuses that mean the cell was attempted and did not give a measurement (exit code 1)."""
NOT_RUN: frozenset[Status] = frozenset({Status.SKIPPED, Status.INTERRUPTED})
"""Statuses of cells that were not (completely) attempted."""
WORKER_STATUSES: frozenset[Status] = frozenset({Status.PASSED, Status.SKIPPED, Status.FAILED, Status.OOM})
"""What a worker may say about its own cell; timeout, crashed and interrupted are the runner's to say."""
