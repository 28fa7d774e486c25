"""A near miss confirmed or not: screens of two candidates taken alternately in one run (step 3, and the finals)."""

from __future__ import annotations

from typing import Any

from ampsuite import results
from ampsuite.contract.tunesteps import Decision, Phase, Verdict, unconfirmed
from ampsuite.tune.common import Logged, Measured, StepLog, _ok, _step, _value
from ampsuite.tune.space import Candidate, WorkloadConfig
from ampsuite.tune.tuner import SCREEN, Tuner

CONFIRM_SCREENS = 3
"""Screens each of a near miss and of what it would replace takes, in one run, for :func:`_confirm`: with 3 against 3,
a gain that is not there passes the test 1 time in 20."""


def _confirm(
    tuner: Tuner,
    config: WorkloadConfig,
    incumbent: Candidate,
    near: Candidate,
    step: Logged,
    log: tuple[StepLog, Phase],
    healthy: list[Measured] | None = None,
) -> dict[str, Any] | None:
    """A near miss, confirmed or not: ``near`` (faster than ``incumbent``, not by :data:`MIN_GAIN`) and the incumbent
    screened again, alternately, until each has :data:`CONFIRM_SCREENS` screens of one run. ``near``'s first screen
    when each of its screens is faster than each of the incumbent's, else None. ``step`` (the near miss's) is decided
    :attr:`Decision.CONFIRMED` or :attr:`Decision.NOT_CONFIRMED`, with the figures; each screen measured here is a
    step of its own under ``log`` (steps, phase), :attr:`Decision.CONFIRMING`, and a first screen measured again
    replaces its candidate's in ``healthy``.

    MIN_GAIN guards figures taken minutes or machines apart: one cell runs up to 0.9% apart in two runs on one H200.
    It also turns down gains that hold up each time they are measured on one machine: on an H200, the stem's
    persistent batch norm gains +0.41-0.49% over three runs and combo_kernels +0.3% over two, and the fastest
    ResNet-50 cell measured stacks such gains (+2.3% over the best without them). Screens of two candidates one
    after another on one machine are what the rule needs instead: with no difference between the two, each order
    of the six figures is as likely, and the three of ``near`` come first in 1 of C(6, 3) = 20. The repeats run
    near, incumbent, incumbent, near after the first screens' incumbent, near: a drift of the machine across the
    six favours neither side by more than one place.

    Screens taken from the file (``--resume``) count as they are: the tuner keeps only records of this machine
    (:func:`ampsuite.analysis.machines.beside`). A screen the budget refuses, or whose numerics are not healthy, ends
    the test: not confirmed.

    A verdict is reached once per pair: a later test of the same two (``--resume``, or the same pair met again) takes
    it as it stands, so that a near miss does not get another draw of the test each time it is met, and a resume
    does not pay six screens again (a compile each, for a compiled step)."""
    pair = (config.key, incumbent.name, near.name)
    earlier = tuner.verdicts.get(pair)
    if earlier is not None:
        step.decide(earlier.decision, earlier.detail(earlier=True))
        first = tuner.run(config, near, SCREEN) if earlier.confirmed else None
        return first if first is not None and _ok(tuner, first, SCREEN) else None
    order = [(incumbent, 1), (near, 1), (near, 2), (incumbent, 2)]
    order += [
        (c, k) for k in range(3, CONFIRM_SCREENS + 1) for c in ((incumbent, near) if k % 2 else (near, incumbent))
    ]
    at_hand = all(tuner.known(config, c, SCREEN, k) for c, k in order)
    records = [tuner.run(config, c, SCREEN, repeat=k) for c, k in order] if at_hand else []
    if not (at_hand and all(_ok(tuner, r, SCREEN) for r in records)):
        records = []
        for c, k in order:
            started = tuner.started
            record = tuner.run(config, c, SCREEN, repeat=k)
            measured = tuner.started > started
            if measured or record is None:
                _step(log[0], tuner, log[1], c, record).decide(
                    Decision.CONFIRMING if measured else Decision.NOT_MEASURED
                )
            if record is None or not _ok(tuner, record, SCREEN):
                why = None if record is None else tuner.untrusted(record, SCREEN) or str(record["status"])
                step.decide(Decision.NOT_CONFIRMED, unconfirmed(why))
                return None
            if k == 1 and healthy is not None:
                healthy[:] = [(c, record) if h[0] == c else h for h in healthy]
            records.append(record)
    mine = [_value(r) for (c, _), r in zip(order, records, strict=True) if c is near]
    theirs = [_value(r) for (c, _), r in zip(order, records, strict=True) if c is incumbent]
    verdict = Verdict.reached(pair, min(mine) > max(theirs), mine, theirs, results.now())
    tuner.decide(verdict)
    step.decide(verdict.decision, verdict.detail(earlier=False))
    return records[1] if verdict.confirmed else None
