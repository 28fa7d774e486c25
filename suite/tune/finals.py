"""Step 4 of the search: the finalists measured in full and the winner chosen among them."""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Any

from ampsuite.contract.tunesteps import Decision, Phase
from ampsuite.tune.common import Measured, StepLog, _gain_over, _ok, _step, _turn_down, _value
from ampsuite.tune.confirm import _confirm
from ampsuite.tune.space import Candidate, WorkloadConfig
from ampsuite.tune.tuner import FULL, Tuner


def _loss_scaled(record: dict[str, Any]) -> bool:
    """Whether the cell trained with a loss scale (amp-fp16, half-weights in float16), which can collapse (a
    7,259 img/s fp16 ResNet-50 cell on an H200 went non-finite at step 3): between figures within noise of each
    other, the recipe without one wins. Read from the record's numerics, where the scaler's starting scale is kept."""
    return (record.get("numerics") or {}).get("scale_start") is not None


def _choose(measured: Sequence[Measured], confirmed: Set[tuple[str, str]] = frozenset()) -> Measured | None:
    """The fastest; then, among those it is not clearly faster than, the fewest techniques, then one without a loss
    scale (bf16 over fp16). A candidate that another of those beat in a confirmed step (``confirmed``: pairs of
    candidate names, slower first, :func:`_confirm`) is not among them: its simplicity was weighed there."""
    if not measured:
        return None
    fastest = max(measured, key=lambda m: _value(m[1]))
    close = [m for m in measured if not _gain_over(fastest[1], m[1])]
    close = [m for m in close if not any((m[0].name, o[0].name) in confirmed for o in close)]
    return min(close, key=lambda m: (len(m[0].techniques), _loss_scaled(m[1]), -_value(m[1])))


def _finals(
    tuner: Tuner,
    config: WorkloadConfig,
    screened: tuple[list[Measured], list[Measured]],
    fp32: Measured,
    steps: StepLog,
) -> Measured | None:
    """Step 4: the greedy paths' ends, the file's last winner (``--resume``) and the next best screened candidates
    measured in full; the winner.

    When the budget leaves a finalist unmeasured, every other screened candidate whose full record is at hand
    (``--resume``) stands in, free: a resumed search whose path grew past the file's winner would otherwise choose
    between the figures it could measure and the slower finalists the file held (a resumed ResNet-50 tune on an
    H200 with a 25-minute budget would choose bf16 + compile + channels-last's 7,272 img/s over the 7,651 of the
    fp16 recipe in the file). Only then: each is a compile of its own, for candidates the search has moved past."""
    others, ends = screened
    finalists = [c for c, _ in sorted(ends, key=lambda m: -_value(m[1]))]
    incumbent = tuner.file_winner(config.key)
    visited = {c.techniques for c, _ in (*others, *ends)}
    if incumbent is not None and incumbent.techniques not in visited and incumbent.batch_size == fp32[0].batch_size:
        # A head start (_head_start) can lead a path past the file's last winner without screening it: it is a
        # finalist all the same, measured again beside this run's figures when it could win, as a path's would be.
        finalists.append(incumbent)
    ranked = [c for c, _ in sorted(others, key=lambda m: -_value(m[1]))]  # the incumbent is not among them
    for candidate in ranked:
        if len(finalists) >= max(tuner.config.finalists, len(ends)):
            break
        finalists.append(candidate)
    trusted: list[Measured] = [fp32] if _ok(tuner, fp32[1], FULL) else []
    refused = False
    for candidate in finalists:
        record = fp32[1] if candidate == fp32[0] else tuner.run(config, candidate, FULL)
        refused = refused or record is None
        _final(tuner, steps, candidate, record, trusted)
    if refused:
        for candidate in ranked:
            if candidate not in finalists and candidate != fp32[0] and tuner.known(config, candidate, FULL):
                _final(tuner, steps, candidate, tuner.run(config, candidate, FULL), trusted, Decision.STOOD_IN)
    return _settle(tuner, config, trusted, steps)


def _settle(tuner: Tuner, config: WorkloadConfig, measured: list[Measured], steps: StepLog) -> Measured | None:
    """Step 4's choice (:func:`_choose`), with each near miss settled: while the choice is a simpler (or loss-scale
    free) recipe that the fastest finalist beats by too little to count, the two are screened against each other
    (:func:`_confirm`, logged as a final step of the fastest); a confirmed gain leaves the simpler one out.

    The finalists are the ends of paths that started from different precisions, which no greedy step held against
    each other: on an H200, a resumed ResNet-50 tune ends with half-weights + the stem's persistent batch norm
    0.9% ahead of the autocast recipe in full, and without this settling would choose the latter for its fewer
    techniques."""
    settled: list[Candidate] = []
    while True:
        choice = _choose(measured, tuner.confirmed(config.key))
        if choice is None:
            return None
        fastest = max(measured, key=lambda m: _value(m[1]))
        if fastest[0] == choice[0] or _value(fastest[1]) <= _value(choice[1]) or choice[0] in settled:
            return choice
        settled.append(choice[0])  # each choice is held against the fastest once
        step = _step(steps, tuner, Phase.FINAL, fastest[0], fastest[1])
        if _confirm(tuner, config, choice[0], fastest[0], step, (steps, Phase.FINAL)) is None:
            return choice


def _final(
    tuner: Tuner,
    steps: StepLog,
    candidate: Candidate,
    record: dict[str, Any] | None,
    trusted: list[Measured],
    decision: Decision = Decision.TRUSTED,
) -> None:
    """Log one finalist's full ``record``, into ``trusted`` when it is (:attr:`Decision.STOOD_IN`: a record at hand
    standing in for a finalist the budget left unmeasured)."""
    step = _step(steps, tuner, Phase.FINAL, candidate, record)
    if record is not None and _ok(tuner, record, FULL):
        trusted.append((candidate, record))
        step.decide(decision)
    else:
        _turn_down(step, record, Decision.NOT_TRUSTED)
