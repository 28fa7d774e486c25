"""Steps 2 and 3 of the search: the precision starting points and greedy forward selection, screened short."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ampsuite.contract.tunesteps import Decision, Phase
from ampsuite.contract.wire import Status
from ampsuite.tune import space
from ampsuite.tune.common import Logged, Measured, StepLog, _gain_over, _lacks, _ok, _step, _turn_down, _value
from ampsuite.tune.confirm import _confirm
from ampsuite.tune.space import AMP, Candidate, WorkloadConfig
from ampsuite.tune.tuner import SCREEN, Tuner


def _greedy(
    tuner: Tuner,
    config: WorkloadConfig,
    start: Measured,
    pool: list[str],
    steps: StepLog,
    healthy: list[Measured],
) -> Measured:
    """Step 3 from one start: add the fastest healthy technique while it clearly helps, else the round's near
    misses together while they clearly help (:func:`_together`); the path's end."""
    current = start
    pool = list(pool)
    while pool:
        trials: list[tuple[str, Measured, Logged]] = []  # this round's healthy additions
        for technique in list(pool):
            trial = current[0].plus(technique)
            if _lacks(tuner, trial, technique):
                continue  # it waits in the pool until what it requires (torch-compile, say) joins the path
            record, step, ok = _trial(tuner, config, trial, steps, healthy)
            if record is not None and record["status"] == Status.SKIPPED:
                pool.remove(technique)  # pruned: a longer combination cannot lift a conflict or a check's reason
            if record is not None and ok:
                trials.append((technique, (trial, record), step))
        # this round's healthy additions faster than the path, clearly or not, fastest first
        faster = sorted((t for t in trials if _value(t[1][1]) > _value(current[1])), key=lambda t: -_value(t[1][1]))
        if faster and _gain_over(faster[0][1][1], current[1]):
            pool.remove(faster[0][0])
            current = faster[0][1]
            faster[0][2].decide(Decision.KEPT)
            continue
        joined = _together(tuner, config, current, [(t, m) for t, m, _ in faster], steps, healthy)
        if joined is None and faster:
            # The round's fastest near miss alone, screened again beside the path until the two can be told apart.
            _, near, step = faster[0]
            first = _confirm(tuner, config, current[0], near[0], step, (steps, Phase.GREEDY), healthy)
            joined = None if first is None else (near[0], first)
            # a first screen of the path measured again there is the path's figure now
            current = next((m for m in healthy if m[0] == current[0]), current)
        if joined is None:
            break
        pool = [t for t in pool if t not in joined[0].techniques]
        current = joined
    return current


def _together(
    tuner: Tuner,
    config: WorkloadConfig,
    current: Measured,
    faster: list[tuple[str, Measured]],
    steps: StepLog,
    healthy: list[Measured],
) -> Measured | None:
    """Step 3's joint step, when no addition clearly helps: the path plus every addition of the round that was
    faster, each not by enough, screened together; the new path when that clearly helps and is healthy.

    A technique worth less than :data:`MIN_GAIN` alone is never kept alone, however real its gain, yet two of
    them can add up: on an H200, the tuned ResNet-50 recipe ran 33.52 ms a step, with stem-pad
    33.23-33.43 ms (+0.3-0.9%), with maxpool-offsets 33.07 ms (+1.4%) and with both 32.74 ms (+2.4%) (two
    techniques of examples/ampsuite-resnet-kernels).
    None when fewer than two were faster: one alone is the round's own screen, already judged.
    """
    if len(faster) < 2:
        return None
    added = [technique for technique, _ in sorted(faster, key=lambda m: -_value(m[1][1]))]
    return _with_all(tuner, config, current, added, steps, healthy, Decision.KEPT_TOGETHER)


def _with_all(
    tuner: Tuner,
    config: WorkloadConfig,
    base: Measured,
    added: Sequence[str],
    steps: StepLog,
    healthy: list[Measured],
    decision: Decision,
    unlogged_if_pruned: bool = False,
) -> Measured | None:
    """``base`` plus every technique of ``added``, screened once: the new path, its step marked ``decision``,
    when it is healthy and clearly faster than ``base``; else None (at once, with no step logged, for a pruned
    trial when ``unlogged_if_pruned``)."""
    trial = base[0]
    for technique in added:
        trial = trial.plus(technique)
    if unlogged_if_pruned and tuner.pruned(config, trial):
        return None
    record, step, ok = _trial(tuner, config, trial, steps, healthy)
    if record is None or not ok or not _gain_over(record, base[1]):
        return None
    step.decide(decision)
    return trial, record


def _trial(
    tuner: Tuner, config: WorkloadConfig, trial: Candidate, steps: StepLog, healthy: list[Measured]
) -> tuple[dict[str, Any] | None, Logged, bool]:
    """One greedy screen of ``trial``, logged: (its record, its step, whether it is healthy). A healthy one joins
    ``healthy`` and its step is :attr:`Decision.NOT_FASTER` until the caller keeps it; any other is rejected (or
    left by the budget, as its step says)."""
    record = tuner.run(config, trial, SCREEN)
    step = _step(steps, tuner, Phase.GREEDY, trial, record)
    if record is None or not _ok(tuner, record, SCREEN):
        _turn_down(step, record, Decision.REJECTED)
        return record, step, False
    healthy.append((trial, record))
    step.decide(Decision.NOT_FASTER)
    return record, step, True


def _screen(
    tuner: Tuner, config: WorkloadConfig, fp32: Measured, steps: StepLog
) -> tuple[list[Measured], list[Measured]]:
    """Steps 2 and 3: (every screened candidate with healthy numerics, slowest first; the greedy paths' ends).

    A greedy path runs from the fastest healthy start, then from each other healthy precision start: the
    dtype that is faster eager is not always the faster one once the companions are in (on an H200,
    ResNet-50 fp16 beats bf16 eager by 23%, while bf16 + channels-last + compile beat fp16 + compile).
    """
    healthy: list[Measured] = []
    starts: list[Measured] = []
    bs = fp32[0].batch_size
    amp = [a for a in AMP if a in tuner.plan.registry.techniques]
    pool = list(space.technique_pool(tuner.spec, tuner.plan.registry))
    precision = _precision_techniques(tuner, config, pool, amp, bs)
    pool = [t for t in pool if t not in precision]
    candidates = [fp32[0], *(Candidate((t,), bs) for t in (*amp, *precision))]
    for start in candidates:
        # FP32 is already measured in full: a screen of it would only be a shorter look at the same cell.
        record = fp32[1] if start == fp32[0] else tuner.run(config, start, SCREEN)
        step = _step(steps, tuner, Phase.START, start, record)
        if record is None or not _ok(tuner, record, SCREEN):
            _turn_down(step, record, Decision.REJECTED)
            continue
        healthy.append((start, record))
        starts.append((start, record))
        step.decide(Decision.HEALTHY)
    if not starts:
        return healthy, []
    starts.sort(key=lambda m: -_value(m[1]))
    paths = [starts[0], *(m for m in starts[1:] if m[0].techniques)]  # FP32 only when it is the fastest start
    ends: list[Measured] = []
    for path in paths:
        leader = max(ends, key=lambda m: _value(m[1]))[0].techniques if ends else None
        if leader is not None and path[0].techniques:
            path = _head_start(tuner, config, path, leader, pool, steps, healthy)
        end = _greedy(tuner, config, path, [t for t in pool if t not in path[0].techniques], steps, healthy)
        if all(end[0] != e[0] for e in ends):
            ends.append(end)
    healthy = [m for m in healthy if all(m[0] != e[0] for e in ends)]
    healthy.sort(key=lambda m: _value(m[1]))
    return healthy, ends


def _head_start(
    tuner: Tuner,
    config: WorkloadConfig,
    start: Measured,
    leader: Sequence[str],
    pool: Sequence[str],
    steps: StepLog,
    healthy: list[Measured],
) -> Measured:
    """Step 3's first screen from a later precision start: the start with every companion of the leading recipe
    (the fastest path's end so far), screened once; the path goes on from there when that is healthy and clearly
    faster than the start, else from the start alone.

    Walked alone, each greedy round of a path screens every technique left in the pool, and with torch.compile on
    the path each screen is a compile of its own (~200 s cold for ResNet-50 on an H200). The companions that made
    one precision fast mostly make the next fast too: on an H200, half-weights on the fp16 recipe's companions runs
    0.4% faster than the fp16 recipe, where its own greedy path screens 14 candidates, 7 of them cold compiles, to
    reach them. A companion that does not help this
    start stays in the recipe until the ablation shows it; one that conflicts with it prunes the whole screen, and
    the path then starts alone.
    """
    companions = [t for t in leader if t in pool and t not in start[0].techniques]
    if len(companions) < 2:
        return start  # one companion is what the path's first round screens anyway
    return _with_all(tuner, config, start, companions, steps, healthy, Decision.HEAD_START, True) or start


def _precision_techniques(
    tuner: Tuner, config: WorkloadConfig, pool: Sequence[str], amp: Sequence[str], bs: int
) -> list[str]:
    """The pool's techniques that set the step's precision themselves: each runs alone, and every AMP dtype
    prunes it. A greedy path from an AMP dtype could never reach one (half-weights, Apex O2, replaces autocast),
    so each starts a path of its own. On an H200, half-weights on ResNet-50's best measured
    combination ran 33.09-33.11 ms a step against the same with amp-fp16's 33.23-33.25.

    Asked of matrix expansion, free; a technique that also lacks a requirement alone (one that requires
    torch-compile) is not one of them. ``amp``: the AMP dtypes this run registers."""
    return [
        t
        for t in pool
        if amp
        and not tuner.pruned(config, Candidate((t,), bs))
        and all(tuner.pruned(config, Candidate((a, t), bs)) for a in amp)
    ]
