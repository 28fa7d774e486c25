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
4. finalists (the paths' ends, then the best screened candidates) measured in full; the winner is
   the fastest trustworthy one, the simplest (then the one without a loss scale) when others are
   not clearly faster, unless a confirmed near miss says otherwise (:func:`_settle`);
5. technique option variants and the other selected batch sizes, measured in
   full against the winner (another batch size gets its own FP32 cell first);
6. the ablation: FP32, TF32 (when the suite declares it), the winner, the
   winner without each of its techniques and without each option value step 5
   chose, measured in full.

Each measurement is one cell through :func:`ampsuite.run.runner.run_record`
(``Tuner.measure``), written to the tune results file before the next starts.
Every figure the search holds against another was measured on one machine: under
``--resume`` the tuner keeps the file's records of this machine and measures
another machine's again (:func:`ampsuite.analysis.machines.beside`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ampsuite import analysis, results
from ampsuite.contract.tunerecords import AblationRow, TuneSummary, Winner, WorkloadTune
from ampsuite.contract.tunesteps import Decision, Phase
from ampsuite.contract.wire import Status
from ampsuite.host.session import Plan
from ampsuite.run.signals import interrupts
from ampsuite.tune import space
from ampsuite.tune.ablation import _ablation
from ampsuite.tune.common import StepLog, _reason, _step, _value
from ampsuite.tune.finals import _finals
from ampsuite.tune.greedy import _screen
from ampsuite.tune.refine import _refine
from ampsuite.tune.space import Candidate, WorkloadConfig
from ampsuite.tune.trust import as_record
from ampsuite.tune.tuner import FULL, Measure, Progress, TuneConfig, Tuner

__all__ = ["Measure", "TuneConfig", "Tuner", "tune", "tune_summary"]

SEARCH = (
    "greedy forward selection from each precision start (the AMP dtypes, techniques replacing autocast), screened "
    "short, a near miss kept when three screens of it each beat three of what it would replace, finalists in full, "
    "every figure from this machine"
)
"""The search in one sentence, for the summary's readers."""


@dataclass
class _Search:
    """One workload configuration's search while it runs: the summary is written from it at any moment (an
    interrupted search keeps what it measured)."""

    config: WorkloadConfig
    steps: StepLog = field(default_factory=StepLog)
    winner: Winner | None = None
    ablation: list[AblationRow] = field(default_factory=list)
    reason: str | None = None

    def record(self) -> WorkloadTune:
        return WorkloadTune(
            self.config.key, self.config.unit, tuple(self.steps.steps), self.winner, tuple(self.ablation), self.reason
        )


def _tune_one(tuner: Tuner, config: WorkloadConfig, result: _Search) -> None:
    """The search for one workload configuration, filling ``result`` (already in the summary) as it goes."""
    bs = config.batch_sizes[0]
    steps = result.steps
    fp32_candidate = Candidate((), bs)
    fp32 = tuner.run(config, fp32_candidate, FULL)
    _step(steps, tuner, Phase.REFERENCE, fp32_candidate, fp32).decide(Decision.REFERENCE)
    if fp32 is None or fp32["status"] != Status.PASSED:
        result.reason = f"the FP32 cell did not pass ({_reason(fp32) or (fp32 or {}).get('status')})"
        return
    screened = _screen(tuner, config, (fp32_candidate, fp32), steps)
    winner = _finals(tuner, config, screened, (fp32_candidate, fp32), steps)
    if winner is None:
        result.reason = "no candidate was trustworthy (not even FP32: see its noise)"
        return
    winner = _refine(tuner, config, winner, steps)
    options = {
        t: space.technique_values(tuner.spec, tuner.plan.registry, t, winner[0].overrides.get(t, {}))
        for t in winner[0].techniques
    }
    derived = analysis.derive(tuner.writer.doc).get(winner[1]["id"])
    result.winner = Winner(
        combination=winner[0].combination,
        techniques=winner[0].techniques,
        options={t: o for t, o in options.items() if o},
        overrides={t: dict(o) for t, o in winner[0].overrides.items()},
        batch_size=winner[0].batch_size,
        cell_id=winner[1]["id"],
        throughput=_value(winner[1]),
        noise=analysis.noise(as_record(winner[1])),
        speedup_vs_fp32=None if derived is None else derived.speedup_vs_fp32,
    )
    _ablation(tuner, config, winner, result.ablation)


def tune_summary(
    plan: Plan, config: TuneConfig, progress: Progress = print, measure: Measure | None = None
) -> TuneSummary:
    """Tune every workload configuration of the plan's cells; returns the summary (also in the results file's
    ``run.tune``). ``measure`` replaces the worker (tests); by default each cell runs in its own process.

    :raises KeyboardInterrupt: when a cell was interrupted (its record and the summary so far are written).
    """
    tuner = Tuner(plan, config, progress, measure)
    units = {name: w.unit for name, w in plan.registry.workloads.items()}
    searches: list[_Search] = []
    incomplete = False
    try:
        with interrupts():
            for workload in space.workload_configs(plan.spec, plan.cells, units):
                # In the summary before its search starts: an interrupted search keeps what it measured.
                searches.append(_Search(workload))
                _tune_one(tuner, workload, searches[-1])
    except KeyboardInterrupt:
        incomplete = True
        for search in searches:
            if search.winner is None and search.reason is None:
                search.reason = "interrupted before a winner was chosen"
        raise
    finally:
        summary = TuneSummary(
            device=plan.device,
            budget_seconds=config.budget_seconds,
            elapsed_seconds=tuner.budget.elapsed(),
            base_techniques=tuple(plan.spec.base_techniques),
            search=SEARCH,
            screen_measure=dataclasses.asdict(tuner.screen_spec.measure),
            finalists=config.finalists,
            reserve_share=config.reserve_share,
            incomplete=incomplete,
            workloads=tuple(search.record() for search in searches),
            started_cells=tuner.started,
            cells=len(tuner.writer.doc["cells"]),
            refused_cells=tuner.budget.refused,
            budget_spent=tuner.budget.refused > 0 or tuner.budget.remaining() <= 0,
            runs=tuner.runs,
            confirmations=tuple(tuner.verdicts.values()),
        )
        tuner.writer.doc["run"]["tune"] = summary.to_json()
        tuner.writer.doc["run"]["finished"] = results.now()
        tuner.writer.flush()
        tuner.close()
    return summary


def tune(plan: Plan, config: TuneConfig, progress: Progress = print, measure: Measure | None = None) -> dict[str, Any]:
    """:func:`tune_summary` as the results file stores it (``run.tune``, JSON): what the ``tune`` command writes its
    outputs from, as it does from a results file after an interruption."""
    return tune_summary(plan, config, progress, measure).to_json()
