"""The search: greedy forward selection over the declared techniques, screened short, finalists measured in full.

Per workload configuration (see docs/tune.md):

1. the FP32 cell, fully measured first: every candidate's loss is held against it;
2. starting points FP32 (its full record), amp-fp16, amp-bf16 and each declared technique that sets the
   precision itself (one that runs alone but that no AMP dtype admits: half-weights, Apex O2) screened (a
   short measure); the fastest with healthy numerics is the start;
3. greedy forward selection: screen the start plus each technique of the pool,
   keep the fastest addition when it is faster by more than the two figures'
   noise and its numerics are healthy, else the round's faster additions
   together on the same terms (the joint step), else the fastest of them alone
   when three screens of it each beat three of the path's, taken alternately in
   this run (a confirmed near miss, :func:`_confirm`); repeat until none helps; one
   path from the fastest start, then one from each other healthy precision start;
   each later path first screens its start with the companions of the fastest
   path's end so far and goes on from there when that clearly helps (the head
   start);
   where screens of more than one run (``--resume``) could decide a round, the
   file's are screened again first, so that it compares figures of one machine;
4. finalists (the paths' ends, then the best screened candidates) measured in full; the winner is
   the fastest trustworthy one, the simplest (then the one without a loss scale) when others are
   not clearly faster, unless a confirmed near miss says otherwise (:func:`_settle`), chosen among
   figures of this run's machine when it has any (:func:`_one_machine`);
5. technique option variants and the other selected batch sizes, measured in
   full against the winner (another batch size gets its own FP32 cell first);
6. the ablation: FP32, TF32 (when the suite declares it), the winner, the
   winner without each of its techniques and without each option value step 5
   chose, measured in full.

Each measurement is one cell through :func:`ampsuite.run.runner.run_record`
(``Tuner.measure``), written to the tune results file before the next starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence, Set
from typing import Any

from ampsuite import analysis, results
from ampsuite.contract.wire import Status
from ampsuite.host.session import Plan
from ampsuite.run.signals import sigterm_interrupts
from ampsuite.spec.options import is_table_option, merge_values
from ampsuite.spec.screens import SCREEN_SUFFIX
from ampsuite.tune import space
from ampsuite.tune.space import AMP, TF32, Candidate, WorkloadConfig
from ampsuite.tune.trust import as_record, untrusted_reason
from ampsuite.tune.tuner import FULL, SCREEN, SCREENED_STEPS, Measure, Progress, TuneConfig, Tuner

__all__ = ["MIN_GAIN", "Measure", "TuneConfig", "Tuner", "tune"]

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

NOT_MEASURED = "not measured: the budget was spent"
"""A step's decision, and an ablation row's reason, when the budget left its candidate unmeasured."""

AGAIN = "held against a candidate measured in this run: both figures from this run's machine"
"""Why a record taken from the file is measured again (:func:`_like_with_like`)."""


def _value(record: dict[str, Any] | None) -> float:
    return (analysis.throughput(as_record(record)) if record is not None else None) or 0.0


def _ok(tuner: Tuner, record: dict[str, Any] | None, phase: str) -> bool:
    """Measured, with a throughput, and trustworthy for ``phase`` (a non-finite loss never is)."""
    return (
        record is not None
        and analysis.throughput(as_record(record)) is not None
        and tuner.untrusted(record, phase) is None
    )


def _step(
    steps: list[dict[str, Any]], tuner: Tuner, phase: str, candidate: Candidate, record: dict[str, Any] | None
) -> dict[str, Any]:
    """Log one measurement of the search (shown on the tune page); the caller sets its ``decision``."""
    step = {
        "phase": phase,
        "combination": candidate.combination,
        "batch_size": candidate.batch_size,
        "cell_id": None if record is None else record["id"],
        "status": "not started (budget)" if record is None else str(record["status"]),
        "throughput": None if record is None else analysis.throughput(as_record(record)),
        "untrusted": None if record is None else tuner.untrusted(record, SCREEN if phase in SCREENED_STEPS else FULL),
        "decision": "",
    }
    steps.append(step)
    return step


def _turn_down(step: dict[str, Any], record: dict[str, Any] | None, decision: str) -> None:
    """A candidate not taken: ``decision`` when it was measured; a candidate the budget left unmeasured
    was not found wanting."""
    step["decision"] = decision if record is not None else NOT_MEASURED


def _lacks(tuner: Tuner, candidate: Candidate, technique: str) -> bool:
    """Whether ``candidate`` lacks a technique that ``technique`` requires. Only techniques count: a device
    requirement (``"cuda"``) is matrix expansion's to judge, and a path cannot grow into it."""
    techniques = tuner.plan.registry.techniques
    have = {*candidate.techniques, *tuner.spec.base_techniques}
    return any(name in techniques and name not in have for name in techniques[technique].requires)


def _greedy(
    tuner: Tuner,
    config: WorkloadConfig,
    start: Measured,
    pool: list[str],
    steps: list[dict[str, Any]],
    healthy: list[Measured],
) -> Measured:
    """Step 3 from one start: add the fastest healthy technique while it clearly helps, else the round's near
    misses together while they clearly help (:func:`_together`); the path's end."""
    current = start
    pool = list(pool)
    while pool:
        trials: list[tuple[str, Measured, dict[str, Any]]] = []  # this round's healthy additions
        for technique in list(pool):
            trial = current[0].plus(technique)
            if _lacks(tuner, trial, technique):
                continue  # it waits in the pool until what it requires (torch-compile, say) joins the path
            record, step, ok = _trial(tuner, config, trial, steps, healthy)
            if record is not None and record["status"] == Status.SKIPPED:
                pool.remove(technique)  # pruned: a longer combination cannot lift a conflict or a check's reason
            if record is not None and ok:
                trials.append((technique, (trial, record), step))
        current, trials = _one_run(tuner, config, current, trials, steps, healthy)
        # this round's healthy additions faster than the path, clearly or not, fastest first
        faster = sorted((t for t in trials if _value(t[1][1]) > _value(current[1])), key=lambda t: -_value(t[1][1]))
        if faster and _gain_over(faster[0][1][1], current[1]):
            pool.remove(faster[0][0])
            current = faster[0][1]
            faster[0][2]["decision"] = "kept"
            continue
        joined = _together(tuner, config, current, [(t, m) for t, m, _ in faster], steps, healthy)
        if joined is None and faster:
            # The round's fastest near miss alone, screened again beside the path until the two can be told apart.
            _, near, step = faster[0]
            first = _confirm(tuner, config, current[0], near[0], step, (steps, "greedy"), healthy)
            joined = None if first is None else (near[0], first)
            # a first screen of the path measured again there is the path's figure now
            current = next((m for m in healthy if m[0] == current[0]), current)
        if joined is None:
            break
        pool = [t for t in pool if t not in joined[0].techniques]
        current = joined
    return current


CONFIRMING = "screened to confirm a near miss"
"""The decision of each screen :func:`_confirm` measures."""

CONFIRM_SCREENS = 3
"""Screens each of a near miss and of what it would replace takes, in one run, for :func:`_confirm`: with 3 against 3,
a gain that is not there passes the test 1 time in 20."""


def _confirm(
    tuner: Tuner,
    config: WorkloadConfig,
    incumbent: Candidate,
    near: Candidate,
    step: dict[str, Any],
    log: tuple[list[Any], str],
    healthy: list[Measured] | None = None,
) -> dict[str, Any] | None:
    """A near miss, confirmed or not: ``near`` (faster than ``incumbent``, not by :data:`MIN_GAIN`) and the incumbent
    screened again, alternately, until each has :data:`CONFIRM_SCREENS` screens of one run. ``near``'s first screen
    when each of its screens is faster than each of the incumbent's, else None. ``step`` (the near miss's) says which
    and gives the figures; each screen measured here is a step of its own under ``log`` (steps, phase), and a first
    screen measured again replaces its candidate's in ``healthy``.

    MIN_GAIN guards figures taken minutes or machines apart: one cell runs up to 0.9% apart in two runs on one H200.
    It also turns down gains that hold up each time they are measured on one machine: on an H200, the stem's
    persistent batch norm gains +0.41-0.49% over three runs and combo_kernels +0.3% over two, and the fastest
    ResNet-50 cell measured stacks such gains (+2.3% over the best without them). Screens of two candidates one
    after another on one machine are what the rule needs instead: with no difference between the two, each order
    of the six figures is as likely, and the three of ``near`` come first in 1 of C(6, 3) = 20. The repeats run
    near, incumbent, incumbent, near after the first screens' incumbent, near: a drift of the machine across the
    six favours neither side by more than one place.

    Screens taken from the file (``--resume``) count only when all six come from one earlier run; otherwise each is
    measured again in this run. A screen the budget refuses, or whose numerics are not healthy, ends the test: not
    confirmed.

    A verdict is reached once per pair: a later test of the same two (``--resume``, or the same pair met again) takes
    it as it stands, so that a near miss does not get another draw of the test each time it is met, and a resume
    does not pay six screens again (a compile each, for a compiled step)."""
    verdict_key = (config.key, incumbent.name, near.name)
    earlier = tuner.verdicts.get(verdict_key)
    if earlier is not None:
        step["decision"] = (
            f"{'kept: confirmed' if earlier['confirmed'] else 'not confirmed'}, as decided {earlier['decided']}"
            f" (screens {earlier['screens']})"
        )
        first = tuner.run(config, near, SCREEN) if earlier["confirmed"] else None
        return first if first is not None and _ok(tuner, first, SCREEN) else None
    order = [(incumbent, 1), (near, 1), (near, 2), (incumbent, 2)]
    order += [
        (c, k) for k in range(3, CONFIRM_SCREENS + 1) for c in ((incumbent, near) if k % 2 else (near, incumbent))
    ]
    at_hand = all(tuner.known(config, c, SCREEN, k) for c, k in order)
    records = [tuner.run(config, c, SCREEN, repeat=k) for c, k in order] if at_hand else []
    one_run = len({tuner.run_of(r) for r in records if r is not None}) == 1
    if not (at_hand and one_run and all(_ok(tuner, r, SCREEN) for r in records)):
        records = []
        for c, k in order:
            started = tuner.started
            record = tuner.run(config, c, SCREEN, again=AGAIN, repeat=k)
            measured = tuner.started > started
            if measured or record is None or not tuner.here(record):
                logged = _step(log[0], tuner, log[1], c, record if measured else None)
                logged["decision"] = CONFIRMING if measured else NOT_MEASURED
            if record is None or not tuner.here(record) or not _ok(tuner, record, SCREEN):
                step["decision"] = f"not confirmed: {_why_unconfirmed(tuner, record)}"
                return None
            if k == 1 and healthy is not None:
                healthy[:] = [(c, record) if h[0] == c else h for h in healthy]
            records.append(record)
    mine = [_value(r) for (c, _), r in zip(order, records, strict=True) if c is near]
    theirs = [_value(r) for (c, _), r in zip(order, records, strict=True) if c is incumbent]
    figures = f"{', '.join(f'{v:,.1f}' for v in mine)} against {', '.join(f'{v:,.1f}' for v in theirs)}"
    confirmed = min(mine) > max(theirs)
    tuner.decide(
        {
            "key": config.key,
            "incumbent": incumbent.name,
            "near": near.name,
            "confirmed": confirmed,
            "screens": figures,
            "decided": f"on {results.now()[:16].replace('T', ' ')} UTC",
        }
    )
    if not confirmed:
        step["decision"] = f"not confirmed: screens {figures}"
        return None
    step["decision"] = f"kept: confirmed, each of its screens faster than each of the incumbent's ({figures})"
    return records[1]


def _why_unconfirmed(tuner: Tuner, record: dict[str, Any] | None) -> str:
    if record is None or not tuner.here(record):
        return "the budget left a repeat unmeasured"
    return f"a repeat was not healthy ({tuner.untrusted(record, SCREEN) or record['status']})"


SCREEN_SPREAD = 0.03
"""How far apart lent H200s (torch 2.11) run one cell: the fp16 ResNet-50 recipe 7,625-7,651 img/s, FP32
1,057-1,064.5, and one machine ~2.3% slower than the others (its selfcheck of the recipe 3.9% slower than the record,
where a selfcheck runs ~1.6% slower than its cell on one machine). :data:`MACHINE_SPREAD` is wider: it also covers
records whose bf16 cells ran fp16 kernels from a dtype-blind compile cache."""


def _one_run(
    tuner: Tuner,
    config: WorkloadConfig,
    current: Measured,
    trials: list[tuple[str, Measured, dict[str, Any]]],
    steps: list[dict[str, Any]],
    healthy: list[Measured],
) -> tuple[Measured, list[tuple[str, Measured, dict[str, Any]]]]:
    """A greedy round's deciding screens from one run: where figures of different runs (``--resume``) decide it,
    those taken from the file are screened again in this run, the path's first (:func:`_like_with_like` says why).
    One that the budget refuses, or whose new screen is not healthy, keeps the file's record.

    What decides a round: the additions that could be its fastest (within :data:`SCREEN_SPREAD` of the fastest),
    and the path's figure when one of them could be faster than it, or clearly faster, on one machine. Figures
    further apart than the spread decide the same on any machine and are compared as they are: screening them
    again would cost a compile each for nothing (a resumed search would walk its whole path again; with
    :data:`MACHINE_SPREAD`'s 10%, a resumed ResNet-50 search spends 750 s of 1,300 on rounds that fused SGD's
    +14% decides on any machine). A close call passed over here can still meet the
    finalists' rule: the best screened candidates are measured in full there, held like with like.

    Held against a screen from another machine, a real gain is lost: on H200s, maxpool-offsets
    (examples/ampsuite-resnet-kernels) on the fp16 recipe screens at 7,703 img/s against the recipe's 7,660 from a
    faster machine, +0.6% and under :data:`MIN_GAIN` (the two machines' selfchecks time the recipe at 34.76 and
    33.46 ms a step), where on one machine maxpool-offsets gains 1.4%."""
    if not trials:
        return current, trials
    spread = 1.0 + SCREEN_SPREAD
    top = max(_value(m[1]) for _, m, _ in trials)
    deciding = [i for i, (_, m, _) in enumerate(trials) if _value(m[1]) * spread >= top]
    path = _value(current[1])
    # the path's figure decides too when a contender lies between "slower on any machine" and "clearly faster on any"
    with_path = any(path < _value(trials[i][1][1]) * spread <= path * (1.0 + MIN_GAIN) * spread**2 for i in deciding)
    figures = [trials[i][1][1] for i in deciding] + ([current[1]] if with_path else [])
    if len({tuner.run_of(r) for r in figures}) <= 1:
        return current, trials
    log = (steps, "greedy")

    def screen_again(measured: Measured) -> Measured:
        new = _again(tuner, config, measured, log, SCREEN)
        healthy[:] = [new if m[0] == new[0] else m for m in healthy]
        return new

    if with_path and not tuner.here(current[1]):
        current = screen_again(current)
    out = list(trials)
    for i in deciding:
        technique, measured, step = trials[i]
        if not tuner.here(measured[1]):
            new = screen_again(measured)
            if new is not measured:
                # The new screen's step (the last logged) carries the round's decision; the file's says it was
                # screened again.
                step["decision"] = SCREENED_AGAIN
                step = steps[-1]
                step["decision"] = "not faster"
            out[i] = (technique, new, step)
    return current, out


SCREENED_AGAIN = "screened again in this run, beside the round's other figures"


def _together(
    tuner: Tuner,
    config: WorkloadConfig,
    current: Measured,
    faster: list[tuple[str, Measured]],
    steps: list[dict[str, Any]],
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
    trial = current[0]
    for technique, _ in sorted(faster, key=lambda m: -_value(m[1][1])):
        trial = trial.plus(technique)
    record, step, ok = _trial(tuner, config, trial, steps, healthy)
    if record is None or not ok or not _gain_over(record, current[1]):
        return None
    step["decision"] = "kept: the round's near misses together"
    return trial, record


def _trial(
    tuner: Tuner, config: WorkloadConfig, trial: Candidate, steps: list[dict[str, Any]], healthy: list[Measured]
) -> tuple[dict[str, Any] | None, dict[str, Any], bool]:
    """One greedy screen of ``trial``, logged: (its record, its step, whether it is healthy). A healthy one joins
    ``healthy`` and its step reads "not faster" until the caller keeps it; any other is rejected (or left by the
    budget, as its step says)."""
    record = tuner.run(config, trial, SCREEN)
    step = _step(steps, tuner, "greedy", trial, record)
    if record is None or not _ok(tuner, record, SCREEN):
        _turn_down(step, record, "rejected")
        return record, step, False
    healthy.append((trial, record))
    step["decision"] = "not faster"
    return record, step, True


def _screen(
    tuner: Tuner, config: WorkloadConfig, fp32: Measured, steps: list[dict[str, Any]]
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
        step = _step(steps, tuner, "start", start, record)
        if record is None or not _ok(tuner, record, SCREEN):
            _turn_down(step, record, "rejected")
            continue
        healthy.append((start, record))
        starts.append((start, record))
        step["decision"] = "healthy"
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


HEAD_START = "kept: the leading recipe's companions"


def _head_start(
    tuner: Tuner,
    config: WorkloadConfig,
    start: Measured,
    leader: Sequence[str],
    pool: Sequence[str],
    steps: list[dict[str, Any]],
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
    trial = start[0]
    for technique in companions:
        trial = trial.plus(technique)
    if tuner.pruned(config, trial):
        return start
    record, step, ok = _trial(tuner, config, trial, steps, healthy)
    if record is None or not ok or not _gain_over(record, start[1]):
        return start
    step["decision"] = HEAD_START
    return trial, record


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


def _hold(
    tuner: Tuner,
    config: WorkloadConfig,
    winner: Measured,
    candidate: Candidate,
    record: dict[str, Any] | None,
    step: dict[str, Any],
    log: tuple[list[Any], str],
) -> tuple[Measured, bool]:
    """Step 5's one comparison: ``candidate``'s full ``record`` against ``winner`` on one machine
    (:func:`_like_with_like`, logged under ``log``); (the winner after it, whether the candidate was kept).
    Sets ``step``'s decision."""
    trusted = record if _ok(tuner, record, FULL) else None
    if trusted is not None:
        winner, (_, trusted) = _like_with_like(tuner, config, winner, (candidate, trusted), log)
    if trusted is not None and _gain_over(trusted, winner[1]):
        step["decision"] = "kept"
        return (candidate, trusted), True
    if trusted is not None and _value(trusted) > _value(winner[1]):
        # A near miss: screened beside the winner until the two can be told apart. The full records stay the
        # figures the search goes on with; the screens only decide.
        if _confirm(tuner, config, winner[0], candidate, step, log) is not None:
            return (candidate, trusted), True
        return winner, False
    _turn_down(step, record, "not better")
    return winner, False


OptionStep = tuple[str, str, Any]
"""(technique, option, value): one option value to try on the winner."""


def _suite_options(tuner: Tuner, technique: str) -> dict[str, Any]:
    """The options the suite runs ``technique`` with: its defaults under the suite's ``[techniques]`` values."""
    return {
        **space.option_defaults(tuner.plan.registry, technique),
        **tuner.spec.technique_options.get(technique, {}),
    }


def _option_steps(tuner: Tuner, winner: Candidate) -> list[OptionStep]:
    """Every option value declared for the winner's techniques other than the one it runs with."""
    out: list[OptionStep] = []
    registry = tuner.plan.registry
    for technique in winner.techniques:
        # The winner's overrides on top (an entry of a table option, OPTION.ENTRY, into that table).
        options_type = registry.techniques[technique].options
        current = merge_values(options_type, _suite_options(tuner, technique), winner.overrides.get(technique, {}))
        declared = tuner.spec.tune_choices.get(technique)
        out += [(technique, o, v) for o, v in space.option_choices(registry, technique, current, declared)]
    return out


def _variant(tuner: Tuner, winner: Candidate, step: OptionStep) -> Candidate:
    technique, option, value = step
    suite = _suite_options(tuner, technique)
    if isinstance(value, Mapping) and is_table_option(tuner.plan.registry.techniques[technique].options, option):
        # A whole table declared as a value ([tune.T] inductor = [{...}]): each of its entries an override, as
        # [tune.T.inductor] declares them, so one cell has one combination id however it was declared.
        for entry, v in value.items():
            name = f"{option}.{entry}"
            winner = winner.with_option(technique, name, v, space.option_value(suite, name))
        return winner
    return winner.with_option(technique, option, value, space.option_value(suite, option))


def _like_with_like(
    tuner: Tuner, config: WorkloadConfig, winner: Measured, variant: Measured, step: tuple[list[Any], str]
) -> tuple[Measured, Measured]:
    """(``winner``, ``variant``), each measured again in this run when the two records come from different runs
    (``--resume``) and it was taken from the file; ``variant`` is a trusted full measurement.

    A resumed file holds records of earlier runs, often on other machines: on the H200s this project
    was lent, one recipe ran 6,758 to 7,139 img/s from machine to machine (ResNet-50, torch 2.11),
    more than most option steps gain. A variant is kept only when it beats the winner on one machine.
    Two records of one earlier run are compared as they are. A record keeps the file's figure when the budget
    refuses the measurement or it is not trusted; the step log says so.
    ``step`` is (the search's steps, the phase) the measurements are logged under.
    """
    if tuner.run_of(winner[1]) == tuner.run_of(variant[1]):
        return winner, variant
    if not tuner.here(winner[1]):
        winner = _again(tuner, config, winner, step)
    if not tuner.here(variant[1]):
        variant = _again(tuner, config, variant, step)
    return winner, variant


def _again(
    tuner: Tuner, config: WorkloadConfig, measured: Measured, step: tuple[list[Any], str], phase: str = FULL
) -> Measured:
    """``measured`` with its record (of ``phase``) measured again in this run (:data:`AGAIN`) and logged as a step,
    or as it was when the budget refuses the measurement or the new one is not trusted."""
    again = tuner.run(config, measured[0], phase, again=AGAIN)
    if again is None or again is measured[1]:  # the budget refused it: the file's record goes on
        _step(step[0], tuner, step[1], measured[0], None)["decision"] = "not measured again: the file's record stays"
        return measured
    logged = _step(step[0], tuner, step[1], measured[0], again)
    if _ok(tuner, again, phase):
        logged["decision"] = "measured again in this run"
        return (measured[0], again)
    # Not trusted: no figure of this machine to compare with. The file's record goes on, in the search and in the
    # results file; this measurement stays in the step log (its figure and why it is not trusted).
    logged["decision"] = "measured again, not trusted: the file's record stays"
    tuner.restore(config, measured[0], measured[1], phase)
    return measured


def _refine(tuner: Tuner, config: WorkloadConfig, winner: Measured, steps: list[dict[str, Any]]) -> Measured:
    """Step 5: the winner's technique option variants, then the other selected batch sizes, in full.

    Hill climbing over the declared values, one at a time: a value that clearly helps is kept, and
    the values passed over are tried again on top of it (on an H200, ViT-B/16's reduce-overhead was
    within noise of plain compile, and kept once coordinate descent was), until no untried variant of
    the winner is left. Variants already measured (``--resume``) come first. A variant measured in
    this run is held against the winner measured in this run (:func:`_like_with_like`).
    """
    tried = {winner[0].combination}  # Candidate holds dicts: not hashable
    while True:
        variants = [_variant(tuner, winner[0], step) for step in _option_steps(tuner, winner[0])]
        variants = [v for v in variants if v.combination not in tried]
        if not variants:
            break
        # A variant with a record at hand (--resume) first: it costs nothing, and the first value that helps
        # is kept, so a budget spent on a new value must not hide a better one already measured.
        variant = next((v for v in variants if tuner.known(config, v, FULL)), variants[0])
        tried.add(variant.combination)
        record = tuner.run(config, variant, FULL)
        step = _step(steps, tuner, "option", variant, record)
        winner, _ = _hold(tuner, config, winner, variant, record, step, (steps, "option"))
    for bs in config.batch_sizes:
        if bs == winner[0].batch_size:
            continue
        # Numerics at another batch size are held against FP32 at that batch size.
        fp32 = tuner.run(config, Candidate((), bs), FULL)
        _step(steps, tuner, "batch", Candidate((), bs), fp32)["decision"] = "reference"
        if fp32 is None or fp32["status"] != Status.PASSED:
            continue
        resized = dataclasses.replace(winner[0], batch_size=bs)
        record = fp32 if not resized.techniques else tuner.run(config, resized, FULL)
        step = _step(steps, tuner, "batch", resized, record) if resized.techniques else steps[-1]
        winner, kept = _hold(tuner, config, winner, resized, record, step, (steps, "batch"))
        if not kept and not resized.techniques:
            step["decision"] = "reference"  # FP32 at this batch size: the reference step it already is
    return winner


def _ablation(tuner: Tuner, config: WorkloadConfig, winner: Measured, out: list[dict[str, Any]]) -> None:
    """Step 6: FP32, TF32 (when declared), the winner, the winner without each technique and without each option
    value the search chose, in full (into ``out``)."""
    bs = winner[0].batch_size
    rows: list[tuple[str, Candidate, str | None]] = [("FP32", Candidate((), bs), None)]
    declared = {t for ts in tuner.spec.combinations.values() for t in ts}
    if TF32 in declared and TF32 in tuner.plan.registry.techniques:
        rows.append(("TF32", Candidate((TF32,), bs), None))
    rows.append(("winner", winner[0], None))
    if len(winner[0].techniques) > 1:
        for t in winner[0].techniques:
            without, dependents = _leave_out(tuner, winner[0], t)
            also = f" (and {', '.join(dependents)}, which require{'s' if len(dependents) == 1 else ''} it)"
            rows.append((f"without {t}{also if dependents else ''}", without, t))
    elif winner[0].techniques:
        rows.append((f"without {winner[0].techniques[0]}", Candidate((), bs), winner[0].techniques[0]))
    # An option value the search chose is a step of the recipe too: its row is the winner with the suite's value.
    for technique, options in sorted(winner[0].overrides.items()):
        for option, value in sorted(options.items()):
            setting = f"{technique}.{option}={value}"
            rows.append((f"without {setting}", winner[0].without_option(technique, option), setting))
    measured: list[tuple[str, Candidate, str | None, dict[str, Any] | None]] = []
    try:
        for label, candidate, removed in rows:
            record = winner[1] if candidate == winner[0] else tuner.run(config, candidate, "ablation")
            measured.append((label, candidate, removed, record))
    except KeyboardInterrupt:
        # The rows measured so far are the summary's; the others say --resume measures them.
        measured += [(label, c, removed, None) for label, c, removed in rows[len(measured) :]]
        out.extend(_ablation_rows(tuner, winner, measured, INTERRUPTED_ROW))
        raise
    out.extend(_ablation_rows(tuner, winner, measured, BUDGET_ROW))


def _leave_out(tuner: Tuner, candidate: Candidate, technique: str) -> tuple[Candidate, list[str]]:
    """``candidate`` without ``technique`` and without the techniques that then lack what they require
    (one that requires torch-compile leaves with it): a row that keeps them would only be a skipped cell."""
    left = candidate.minus(technique)
    dependents: list[str] = []
    while True:
        orphan = next((t for t in left.techniques if _lacks(tuner, left, t)), None)
        if orphan is None:
            return left, dependents
        left = left.minus(orphan)
        dependents.append(orphan)


BUDGET_ROW = ("not started (budget)", NOT_MEASURED)
INTERRUPTED_ROW = (str(Status.INTERRUPTED), "not measured: the run was interrupted (--resume measures it)")


def _ablation_rows(
    tuner: Tuner,
    winner: Measured,
    measured: list[tuple[str, Candidate, str | None, dict[str, Any] | None]],
    unmeasured: tuple[str, str],
) -> list[dict[str, Any]]:
    """The ablation's rows; ``unmeasured`` is (status, reason) of a row without a record."""
    doc = tuner.writer.doc
    derived = analysis.derive(doc)
    win_value = analysis.throughput(as_record(winner[1]))
    # Contributions set figures of this run beside records of earlier runs (--resume), which may come from
    # another machine: each such row says so when the table mixes the two.
    records = [r for _, _, _, r in measured if r is not None]
    mixed = len({tuner.run_of(r) for r in records}) > 1
    out = []
    for label, candidate, removed, record in measured:
        d = derived.get(record["id"]) if record is not None else None
        value = analysis.throughput(as_record(record)) if record is not None else None
        contribution = None if removed is None or not value or not win_value else win_value / value - 1.0
        earlier = (
            f"measured in an earlier run ({str(record.get('started'))[:16]}), maybe on another machine"
            if mixed and record is not None and not tuner.here(record)
            else None
        )
        screens = None if removed is None or record is None else _screens_of_one_run(tuner, winner[1], record)
        if screens is not None:
            contribution = screens[0] / screens[1] - 1.0
            earlier = "; ".join(
                n
                for n in (earlier, f"contribution from this run's screens, {screens[0]:,.1f} against {screens[1]:,.1f}")
                if n
            )
        out.append(
            {
                "label": label,
                "combination": candidate.combination,
                "techniques": list(candidate.techniques),
                "options": candidate.settings,
                "removed": removed,
                "cell_id": None if record is None else record["id"],
                "status": unmeasured[0] if record is None else str(record["status"]),
                "reason": unmeasured[1] if record is None else _reason(record),
                "throughput": value,
                "speedup_vs_fp32": None if d is None else d.speedup_vs_fp32,
                "speedup_vs_tf32": None if d is None else d.speedup_vs_tf32,
                "contribution": contribution,
                "untrusted": None if record is None else untrusted_reason(record, doc),
                "earlier_run": earlier,
            }
        )
    return out


def _screens_of_one_run(tuner: Tuner, winner: dict[str, Any], record: dict[str, Any]) -> tuple[float, float] | None:
    """The winner's and a leave-one-out row's screens, both measured in this run, when their full records come
    from two runs (``--resume``): (winner, row) throughput, or None.

    Two runs may be two machines. On an H200, the winner measured in full (7,622.7 img/s) against the file's record
    of the recipe without maxpool-offsets (examples/ampsuite-resnet-kernels) from a faster machine (7,651.2) gives
    maxpool-offsets -0.4%, where the same run's screens of the two are 7,707.6 and 7,498.7, +2.8%. Screens are
    shorter measurements, but of one machine, one after another."""
    if tuner.run_of(record) == tuner.run_of(winner):
        return None
    pair = [tuner.kept.get(str(r["id"]) + SCREEN_SUFFIX) for r in (winner, record)]
    values = [
        analysis.throughput(as_record(s))
        if s is not None and tuner.here(s) and s.get("status") == Status.PASSED
        else None
        for s in pair
    ]
    if values[0] and values[1]:
        return float(values[0]), float(values[1])
    return None


def _reason(record: dict[str, Any] | None) -> str | None:
    if record is None:
        return NOT_MEASURED
    evidence = record.get("evidence") or {}
    return evidence.get("reason") or evidence.get("message")


def _tune_one(tuner: Tuner, config: WorkloadConfig, result: dict[str, Any]) -> None:
    """The search for one workload configuration, filling ``result`` (already in the summary) as it goes."""
    bs = config.batch_sizes[0]
    steps: list[dict[str, Any]] = result["steps"]
    fp32_candidate = Candidate((), bs)
    fp32 = tuner.run(config, fp32_candidate, FULL)
    _step(steps, tuner, "reference", fp32_candidate, fp32)["decision"] = "reference"
    if fp32 is None or fp32["status"] != Status.PASSED:
        result["reason"] = f"the FP32 cell did not pass ({_reason(fp32) or (fp32 or {}).get('status')})"
        return
    screened = _screen(tuner, config, (fp32_candidate, fp32), steps)
    winner = _finals(tuner, config, screened, (fp32_candidate, fp32), steps)
    if winner is None:
        result["reason"] = "no candidate was trustworthy (not even FP32: see its noise)"
        return
    winner = _refine(tuner, config, winner, steps)
    options = {
        t: space.technique_values(tuner.spec, tuner.plan.registry, t, winner[0].overrides.get(t, {}))
        for t in winner[0].techniques
    }
    derived = analysis.derive(tuner.writer.doc).get(winner[1]["id"])
    result["winner"] = {
        "combination": winner[0].combination,
        "techniques": list(winner[0].techniques),
        "options": {t: o for t, o in options.items() if o},
        "overrides": {t: dict(o) for t, o in winner[0].overrides.items()},
        "batch_size": winner[0].batch_size,
        "cell_id": winner[1]["id"],
        "throughput": analysis.throughput(as_record(winner[1])),
        "noise": analysis.noise(as_record(winner[1])),
        "speedup_vs_fp32": None if derived is None else derived.speedup_vs_fp32,
        "unsettled": [
            {"combination": s["combination"], "cell_id": s["cell_id"], "throughput": s["throughput"]}
            for s in steps
            if s["decision"] == UNSETTLED
        ],
    }
    _ablation(tuner, config, winner, result["ablation"])


def tune(plan: Plan, config: TuneConfig, progress: Progress = print, measure: Measure | None = None) -> dict[str, Any]:
    """Tune every workload configuration of the plan's cells; returns the summary (also in the results file's
    ``run.tune``). ``measure`` replaces the worker (tests); by default each cell runs in its own process.

    :raises KeyboardInterrupt: when a cell was interrupted (its record and the summary so far are written).
    """
    tuner = Tuner(plan, config, progress, measure)
    units = {name: w.unit for name, w in plan.registry.workloads.items()}
    summary: dict[str, Any] = {
        "budget_seconds": config.budget_seconds,
        "device": plan.device,
        "base_techniques": list(plan.spec.base_techniques),
        "search": "greedy forward selection from each precision start (the AMP dtypes, techniques replacing "
        "autocast), screened short, a near miss kept when three screens of it each beat three of what it would "
        "replace, finalists in full, the winner chosen among one machine's figures",
        "screen_measure": dataclasses.asdict(tuner.screen_spec.measure),
        "finalists": config.finalists,
        "reserve_share": config.reserve_share,
        "incomplete": False,
        "workloads": [],
    }
    try:
        with sigterm_interrupts():
            for workload in space.workload_configs(plan.spec, plan.cells, units):
                # In the summary before its search starts: an interrupted search keeps what it measured.
                result: dict[str, Any] = {
                    "key": workload.key,
                    "unit": workload.unit,
                    "steps": [],
                    "winner": None,
                    "ablation": [],
                }
                summary["workloads"].append(result)
                _tune_one(tuner, workload, result)
    except KeyboardInterrupt:
        summary["incomplete"] = True  # interrupted
        for w in summary["workloads"]:
            w.setdefault("reason", "interrupted before a winner was chosen")
        raise
    finally:
        summary["elapsed_seconds"] = tuner.budget.elapsed()
        summary["started_cells"] = tuner.started
        summary["cells"] = len(tuner.writer.doc["cells"])
        summary["refused_cells"] = tuner.budget.refused
        summary["budget_spent"] = tuner.budget.refused > 0 or tuner.budget.remaining() <= 0
        summary["confirmations"] = list(tuner.verdicts.values())
        tuner.writer.doc["run"]["tune"] = summary
        tuner.writer.doc["run"]["finished"] = results.now()
        tuner.writer.flush()
        tuner.close()
    return summary
