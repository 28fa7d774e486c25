"""Step 4 of the search: the finalists measured in full and the winner chosen among them."""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Any

from ampsuite.tune.common import Measured, _again, _gain_over, _ok, _step, _turn_down, _value
from ampsuite.tune.confirm import _confirm
from ampsuite.tune.space import Candidate, WorkloadConfig
from ampsuite.tune.tuner import FULL, Tuner


def _loss_scaled(record: dict[str, Any]) -> bool:
    """Whether the cell trained with a loss scale (amp-fp16, half-weights in float16), which can collapse (issue
    15's 7,259 img/s ResNet-50 cell went non-finite at step 3): between figures within noise of each other, the
    recipe without one wins. Read from the record's numerics, where the scaler's starting scale is kept."""
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
    steps: list[dict[str, Any]],
) -> Measured | None:
    """Step 4: the greedy paths' ends, the file's last winner (``--resume``) and the next best screened candidates
    measured in full; the winner.

    When the budget leaves a finalist unmeasured, every other screened candidate whose full record is at hand
    (``--resume``) stands in, free: a resumed search whose path grew past the file's winner would otherwise choose
    between the figures it could measure and the slower finalists the file held (a resumed ResNet-50 tune on an
    H200 with a 25-minute budget would choose bf16 + compile + channels-last's 7,272 img/s over the 7,651 of the
    fp16 recipe in the file). Only then: they would be measured again beside a
    figure of this run (:func:`_from_this_machine`), a compile each, for candidates the search has moved past."""
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
                _final(tuner, steps, candidate, tuner.run(config, candidate, FULL), trusted, STOOD_IN)
    return _settle(
        tuner, config, _one_machine(tuner, config, _from_this_machine(tuner, config, trusted, steps), steps), steps
    )


def _settle(
    tuner: Tuner, config: WorkloadConfig, measured: list[Measured], steps: list[dict[str, Any]]
) -> Measured | None:
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
        step = _step(steps, tuner, "final", fastest[0], fastest[1])
        if _confirm(tuner, config, choice[0], fastest[0], step, (steps, "final")) is None:
            return choice


STOOD_IN = "trusted: a record at hand, for a finalist the budget left unmeasured"


def _final(
    tuner: Tuner,
    steps: list[dict[str, Any]],
    candidate: Candidate,
    record: dict[str, Any] | None,
    trusted: list[Measured],
    decision: str = "trusted",
) -> None:
    """Log one finalist's full ``record``, into ``trusted`` when it is."""
    step = _step(steps, tuner, "final", candidate, record)
    if record is not None and _ok(tuner, record, FULL):
        trusted.append((candidate, record))
        step["decision"] = decision
    else:
        _turn_down(step, record, "not trusted")


MACHINE_SPREAD = 0.10
"""How much slower than a figure of this run a record of an earlier run may be and still win once measured here.
H200s lent at different times ran one ResNet-50 recipe at 6,758 to 7,139 img/s (5.6% apart); twice that. (The
7,139 most likely ran fp16 kernels from a dtype-blind compile cache, so the machines alone differ by less.)"""


def _from_this_machine(
    tuner: Tuner, config: WorkloadConfig, trusted: list[Measured], steps: list[dict[str, Any]]
) -> list[Measured]:
    """``trusted``, with the records of earlier runs (``--resume``) that could win measured again in this run, so
    the choice is made between figures of one machine (:func:`_like_with_like` says why).

    Nothing is measured when every record comes from one run. Otherwise records of earlier runs are measured
    again, fastest first, while one is faster than the best figure of this run less :data:`MACHINE_SPREAD`
    (the first of them when this run has none). Without this, a resumed ResNet-50 tune on an H200 with no
    finalist measured in its own run would choose bf16 + compile (7,049 img/s on a faster machine) over bf16 +
    compile + channels-last (6,805, measured on a slower one)."""
    if len({tuner.run_of(m[1]) for m in trusted}) <= 1:
        return trusted
    here = [_value(m[1]) for m in trusted if tuner.here(m[1])]
    best_here, out = max(here, default=None), list(trusted)
    for i in sorted(range(len(out)), key=lambda i: -_value(out[i][1])):
        record = out[i][1]
        if tuner.here(record):
            continue
        if best_here is not None and _value(record) <= best_here * (1.0 - MACHINE_SPREAD):
            break
        out[i] = _again(tuner, config, out[i], (steps, "final"))
        if out[i][1] is not record:
            best_here = max(best_here or 0.0, _value(out[i][1]))
        elif best_here is None:
            break  # not measured again, and nothing of this run to hold the others against: the file decides
    return out


UNSETTLED = "left out: an earlier run's figure with none of this machine's, within the machines' spread"
"""A finalist's decision when :func:`_one_machine` leaves its record of an earlier run out of the choice."""


def _one_machine(
    tuner: Tuner, config: WorkloadConfig, measured: list[Measured], steps: list[dict[str, Any]]
) -> list[Measured]:
    """The finalists step 4 chooses among: those measured in this run, when it measured any. A record of an
    earlier run that :func:`_from_this_machine` could not measure again (the budget, or an untrusted figure) joins
    them only when it is faster than all of them by more than :data:`MACHINE_SPREAD`, more than machines differ;
    one that could have been chosen otherwise (faster by less, or level and simpler) is logged as a final step
    (:data:`UNSETTLED`, named beside the winner) and not chosen. With nothing measured in this run, the file's
    records decide as they are.

    On an H200, a resumed ResNet-50 tune measures two paths' ends in full (7,625.2 and 7,340.1 img/s) while the
    budget leaves the file's fp16 + compile + fused SGD + channels-last (7,651.2, from another machine two days
    earlier) unmeasured; the rule for fewer techniques alone would choose it, yet a selfcheck on the tune's machine
    runs it at 35.02 ms a step, 7,310 img/s: 4.1% slower than the recipe it would pass over."""
    here = [m for m in measured if tuner.here(m[1])]
    if not here:
        return measured
    bar = max(_value(m[1]) for m in here) * (1.0 + MACHINE_SPREAD)
    earlier = [m for m in measured if not tuner.here(m[1])]
    out = here + [m for m in earlier if _value(m[1]) > bar]
    top = max(out, key=lambda m: _value(m[1]))[1]
    for candidate, record in earlier:
        # Named when it could have been chosen (faster than the choice, or level with it and simpler).
        if _value(record) <= bar and not _gain_over(top, record):
            _step(steps, tuner, "final", candidate, record)["decision"] = UNSETTLED
            tuner.note(f"{config.key}: {candidate.name} ({_value(record):,.1f}) {UNSETTLED}")
    return out
