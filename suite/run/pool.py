"""A cell measured by several processes, one after another, and the one outcome they give.

With ``[measure] processes = N`` a single-process cell is measured by N fresh
workers (each with the full timeout, each exactly as a single one); the first
that does not pass is the cell's outcome, and when all pass their samples are
pooled (:func:`pool_outcomes`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ampsuite.contract.cell import Cell
from ampsuite.contract.wire import Outcome, Status
from ampsuite.run import attempt, measure, nodes
from ampsuite.run.attempt import CellJob
from ampsuite.spec.suitespec import SuiteSpec

__all__ = ["measure_processes", "most_processes", "pool_outcomes", "process_count"]


def process_count(spec: SuiteSpec, cell: Cell) -> int:
    """How many processes measure ``cell``: ``[measure] processes`` (at least ``[quality] seeds`` in a quality
    suite), or 1 for a data-parallel cell.

    A data-parallel cell's record combines its ranks (:mod:`ampsuite.run.launcher`; a multi-node
    cell's node processes are run by :mod:`ampsuite.run.nodes`);
    pooling several such runs is not done, so ``processes`` does not apply to it.
    """
    return most_processes(spec) if cell.world_size <= 1 else 1


def most_processes(spec: SuiteSpec) -> int:
    """The processes a single-process cell of ``spec`` is measured in."""
    return max(spec.measure.processes, spec.quality.seeds if spec.quality is not None else 1)


def measure_processes(job: CellJob) -> Outcome:
    """The cell's outcome from :func:`process_count` attempts, one after another, each exactly as a single one.

    The first attempt that does not pass is the outcome (its ``evidence`` gains
    ``process``, 1-based, when there is more than one); when all pass, their
    samples are pooled by :func:`pool_outcomes`.
    """
    if job.cell.nodes > 1:
        return nodes.measure_nodes(job)  # one run of every node process (ampsuite.run.nodes)
    n = process_count(job.spec, job.cell)
    if n == 1:
        return attempt.measure_once(job)
    passed = []
    for i in range(1, n + 1):
        log = job.log if i == 1 else job.log.with_name(f"{job.log.stem}-process{i}{job.log.suffix}")
        seeded = dataclasses.replace(job, log=log, seed_offset=i - 1 if job.spec.quality is not None else 0)
        try:
            result = attempt.measure_once(seeded)
        except KeyboardInterrupt as exc:
            result = attempt.interrupted_outcome(log, exc)
        if result.get("status") != Status.PASSED:
            evidence = result.get("evidence")
            if isinstance(evidence, dict):
                result = {**result, "evidence": {**evidence, "process": i}}
            return result
        passed.append(result)
    return pool_outcomes(passed, job.spec.measure.noise_target)


def pool_outcomes(outcomes: Sequence[Outcome], noise_target: float) -> Outcome:
    """One outcome from the passed outcomes of several processes measuring the same cell.

    The first outcome, with every process's quality run (one per seed) under ``quality.runs``,
    ``metrics.step_time`` recomputed from every
    process's samples pooled in order (:func:`ampsuite.run.measure.pool`: its ``noise``
    is the larger of the pooled noise and the between-process noise of the
    medians), ``metrics.step_time.processes`` listing each process's median,
    noise and steps, ``throughput`` and ``tflops`` from the pooled median, and
    the timing warnings (:func:`ampsuite.run.measure.timing_warnings`) rewritten for the
    pooled figures; the first outcome's other warnings are kept.
    """
    first = outcomes[0]
    if len(outcomes) == 1:
        return first
    seeds = [run for o in outcomes if "quality" in o for run in o["quality"]["runs"]]
    if seeds:
        first = {**first, "quality": {"runs": seeds}}
    step_times = [(o.get("metrics") or {}).get("step_time") or {} for o in outcomes]
    runs: list[list[float]] = [st.get("samples") or [] for st in step_times]
    if not all(isinstance(r, list) and r for r in runs):  # a worker that passed always records its samples
        note = "processes not pooled: a process recorded no samples"
        return {**first, "warnings": [*first.get("warnings", []), note]}
    stats = measure.pool(runs)
    metrics = dict(first["metrics"])
    metrics["step_time"] = {
        **stats,
        "processes": [{"median": st["median"], "noise": st["noise"], "n": st["n"]} for st in step_times],
    }
    measure.rates(metrics, stats["median"])
    # The first process's own timing warnings are exactly what the same function said of its samples.
    own = measure.timing_warnings(measure.summarize(runs[0]), noise_target)
    warnings = [w for w in first.get("warnings", []) if w not in own]
    at = next((i for i, w in enumerate(first.get("warnings", [])) if w in own), len(warnings))
    warnings[at:at] = measure.timing_warnings(stats, noise_target)
    return {**first, "metrics": metrics, "warnings": warnings}
