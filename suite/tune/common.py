"""What every phase of the search shares: a figure, whether it is trustworthy, the step log, the gain test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ampsuite import analysis
from ampsuite.contract.tunesteps import NOT_STARTED, Decision, Phase, Step
from ampsuite.tune.space import Candidate
from ampsuite.tune.trust import as_record
from ampsuite.tune.tuner import FULL, SCREEN, Tuner

MIN_GAIN = analysis.MIN_RELATIVE_CHANGE
"""Smallest relative throughput gain that counts, whatever the noise: the change ``ampsuite compare`` reports."""


def _gain_over(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether ``a`` is faster than ``b`` by more than both figures' noise (and :data:`MIN_GAIN`)."""
    ta, tb = analysis.throughput(as_record(a)), analysis.throughput(as_record(b))
    if ta is None or tb is None:
        return False
    margin = max(MIN_GAIN, (analysis.noise(as_record(a)) or 0.0) + (analysis.noise(as_record(b)) or 0.0))
    return ta > tb * (1.0 + margin)


Measured = tuple[Candidate, dict[str, Any]]


def _value(record: dict[str, Any] | None) -> float:
    return (analysis.throughput(as_record(record)) if record is not None else None) or 0.0


def _ok(tuner: Tuner, record: dict[str, Any] | None, phase: str) -> bool:
    """Measured, with a throughput, and trustworthy for ``phase`` (a non-finite loss never is)."""
    return (
        record is not None
        and analysis.throughput(as_record(record)) is not None
        and tuner.untrusted(record, phase) is None
    )


class StepLog:
    """One workload configuration's steps, in the order measured. A step is logged when measured and decided
    when its phase knows (a greedy screen reads "not taken" until the round keeps it): :meth:`Logged.decide`
    replaces the frozen :class:`Step` in place."""

    def __init__(self) -> None:
        self.steps: list[Step] = []


@dataclass(frozen=True)
class Logged:
    """A step of a :class:`StepLog`, still to be decided (or decided again)."""

    log: StepLog
    at: int

    def decide(self, decision: Decision, detail: str = "") -> None:
        self.log.steps[self.at] = self.log.steps[self.at].decided(decision, detail)


def _step(log: StepLog, tuner: Tuner, phase: Phase, candidate: Candidate, record: dict[str, Any] | None) -> Logged:
    """Log one measurement of the search (shown on the tune page), :attr:`Decision.PENDING` until decided."""
    log.steps.append(
        Step(
            phase=phase,
            combination=candidate.combination,
            batch_size=candidate.batch_size,
            cell_id=None if record is None else record["id"],
            status=NOT_STARTED if record is None else str(record["status"]),
            throughput=None if record is None else analysis.throughput(as_record(record)),
            untrusted=None if record is None else tuner.untrusted(record, SCREEN if phase.screened else FULL),
        )
    )
    return Logged(log, len(log.steps) - 1)


def _turn_down(step: Logged, record: dict[str, Any] | None, decision: Decision) -> None:
    """A candidate not taken: ``decision`` when it was measured; a candidate the budget left unmeasured
    was not found wanting."""
    step.decide(decision if record is not None else Decision.NOT_MEASURED)


def _lacks(tuner: Tuner, candidate: Candidate, technique: str) -> bool:
    """Whether ``candidate`` lacks a technique that ``technique`` requires. Only techniques count: a device
    requirement (``"cuda"``) is matrix expansion's to judge, and a path cannot grow into it."""
    techniques = tuner.plan.registry.techniques
    have = {*candidate.techniques, *tuner.spec.base_techniques}
    return any(name in techniques and name not in have for name in techniques[technique].requires)


def _reason(record: dict[str, Any] | None) -> str | None:
    if record is None:
        return Decision.NOT_MEASURED.label
    evidence = record.get("evidence") or {}
    return evidence.get("reason") or evidence.get("message")
