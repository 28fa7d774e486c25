"""Step 5 of the search: the winner's technique option variants and the other batch sizes, in full."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ampsuite.contract.tunesteps import Decision, Phase
from ampsuite.contract.wire import Status
from ampsuite.spec.options import is_table_option, merge_values
from ampsuite.tune import space
from ampsuite.tune.common import Logged, Measured, StepLog, _gain_over, _ok, _step, _turn_down, _value
from ampsuite.tune.confirm import _confirm
from ampsuite.tune.space import Candidate, WorkloadConfig
from ampsuite.tune.tuner import FULL, Tuner


def _hold(
    tuner: Tuner,
    config: WorkloadConfig,
    winner: Measured,
    candidate: Candidate,
    record: dict[str, Any] | None,
    step: Logged,
    log: tuple[StepLog, Phase],
) -> tuple[Measured, bool]:
    """Step 5's one comparison: ``candidate``'s full ``record`` against ``winner`` (both of this machine), a near
    miss confirmed by screens logged under ``log``; (the winner after it, whether the candidate was kept). Sets
    ``step``'s decision."""
    trusted = record if _ok(tuner, record, FULL) else None
    if trusted is not None and _gain_over(trusted, winner[1]):
        step.decide(Decision.KEPT)
        return (candidate, trusted), True
    if trusted is not None and _value(trusted) > _value(winner[1]):
        # A near miss: screened beside the winner until the two can be told apart. The full records stay the
        # figures the search goes on with; the screens only decide.
        if _confirm(tuner, config, winner[0], candidate, step, log) is not None:
            return (candidate, trusted), True
        return winner, False
    _turn_down(step, record, Decision.NOT_BETTER)
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


def _refine(tuner: Tuner, config: WorkloadConfig, winner: Measured, steps: StepLog) -> Measured:
    """Step 5: the winner's technique option variants, then the other selected batch sizes, in full.

    Hill climbing over the declared values, one at a time: a value that clearly helps is kept, and
    the values passed over are tried again on top of it (on an H200, ViT-B/16's reduce-overhead was
    within noise of plain compile, and kept once coordinate descent was), until no untried variant of
    the winner is left. Variants already measured (``--resume``, on this machine) come first.
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
        step = _step(steps, tuner, Phase.OPTION, variant, record)
        winner, _ = _hold(tuner, config, winner, variant, record, step, (steps, Phase.OPTION))
    for bs in config.batch_sizes:
        if bs == winner[0].batch_size:
            continue
        # Numerics at another batch size are held against FP32 at that batch size.
        fp32 = tuner.run(config, Candidate((), bs), FULL)
        reference = _step(steps, tuner, Phase.BATCH, Candidate((), bs), fp32)
        reference.decide(Decision.REFERENCE)
        if fp32 is None or fp32["status"] != Status.PASSED:
            continue
        resized = dataclasses.replace(winner[0], batch_size=bs)
        record = fp32 if not resized.techniques else tuner.run(config, resized, FULL)
        step = _step(steps, tuner, Phase.BATCH, resized, record) if resized.techniques else reference
        winner, kept = _hold(tuner, config, winner, resized, record, step, (steps, Phase.BATCH))
        if not kept and not resized.techniques:
            step.decide(Decision.REFERENCE)  # FP32 at this batch size: the reference step it already is
    return winner
