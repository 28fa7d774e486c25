"""Step 6 of the search: FP32, TF32, the winner and the winner without each of its techniques, in full."""

from __future__ import annotations

from typing import Any

from ampsuite import analysis
from ampsuite.contract.tunerecords import AblationRow, RowKind
from ampsuite.contract.tunesteps import NOT_STARTED, Decision
from ampsuite.contract.wire import Status
from ampsuite.tune.common import Measured, _lacks, _reason
from ampsuite.tune.space import TF32, Candidate, WorkloadConfig
from ampsuite.tune.trust import as_record, untrusted_reason
from ampsuite.tune.tuner import Tuner

Row = tuple[RowKind, Candidate, str | None, list[str]]
"""An ablation row to measure: (kind, candidate, what it removes from the winner, the techniques that leave with
it because they require it)."""


def _ablation(tuner: Tuner, config: WorkloadConfig, winner: Measured, out: list[AblationRow]) -> None:
    """Step 6: FP32, TF32 (when declared), the winner, the winner without each technique and without each option
    value the search chose, in full (into ``out``)."""
    bs = winner[0].batch_size
    rows: list[Row] = [(RowKind.FP32, Candidate((), bs), None, [])]
    declared = {t for ts in tuner.spec.combinations.values() for t in ts}
    if TF32 in declared and TF32 in tuner.plan.registry.techniques:
        rows.append((RowKind.TF32, Candidate((TF32,), bs), None, []))
    rows.append((RowKind.WINNER, winner[0], None, []))
    if len(winner[0].techniques) > 1:
        for t in winner[0].techniques:
            rows.append((RowKind.WITHOUT, *_leave_out(tuner, winner[0], t)))
    elif winner[0].techniques:
        rows.append((RowKind.WITHOUT, Candidate((), bs), winner[0].techniques[0], []))
    # An option value the search chose is a step of the recipe too: its row is the winner with the suite's value.
    for technique, options in sorted(winner[0].overrides.items()):
        for option, value in sorted(options.items()):
            without = winner[0].without_option(technique, option)
            rows.append((RowKind.WITHOUT, without, f"{technique}.{option}={value}", []))
    measured: list[tuple[Row, dict[str, Any] | None]] = []
    try:
        for row in rows:
            candidate = row[1]
            record = winner[1] if candidate == winner[0] else tuner.run(config, candidate, "ablation")
            measured.append((row, record))
    except KeyboardInterrupt:
        # The rows measured so far are the summary's; the others say --resume measures them.
        measured += [(row, None) for row in rows[len(measured) :]]
        out.extend(_ablation_rows(tuner, winner, measured, INTERRUPTED_ROW))
        raise
    out.extend(_ablation_rows(tuner, winner, measured, BUDGET_ROW))


def _leave_out(tuner: Tuner, candidate: Candidate, technique: str) -> tuple[Candidate, str, list[str]]:
    """``candidate`` without ``technique`` and without the techniques that then lack what they require
    (one that requires torch-compile leaves with it: a row that keeps them would only be a skipped cell):
    (that candidate, ``technique``, those techniques)."""
    left = candidate.minus(technique)
    dependents: list[str] = []
    while True:
        orphan = next((t for t in left.techniques if _lacks(tuner, left, t)), None)
        if orphan is None:
            return left, technique, dependents
        left = left.minus(orphan)
        dependents.append(orphan)


BUDGET_ROW = (NOT_STARTED, Decision.NOT_MEASURED.label)


INTERRUPTED_ROW = (str(Status.INTERRUPTED), "not measured: the run was interrupted (--resume measures it)")


def _ablation_rows(
    tuner: Tuner,
    winner: Measured,
    measured: list[tuple[Row, dict[str, Any] | None]],
    unmeasured: tuple[str, str],
) -> list[AblationRow]:
    """The ablation's rows; ``unmeasured`` is (status, reason) of a row without a record."""
    doc = tuner.writer.doc
    derived = analysis.derive(doc)
    win_value = analysis.throughput(as_record(winner[1]))
    out = []
    for (kind, candidate, removed, dependents), record in measured:
        d = derived.get(record["id"]) if record is not None else None
        value = analysis.throughput(as_record(record)) if record is not None else None
        out.append(
            AblationRow(
                kind=kind,
                label=AblationRow.label_of(kind, removed, dependents),
                combination=candidate.combination,
                techniques=candidate.techniques,
                options=tuple(candidate.settings),
                removed=removed,
                cell_id=None if record is None else record["id"],
                status=unmeasured[0] if record is None else str(record["status"]),
                reason=unmeasured[1] if record is None else _reason(record),
                throughput=value,
                speedup_vs_fp32=None if d is None else d.speedup_vs_fp32,
                speedup_vs_tf32=None if d is None else d.speedup_vs_tf32,
                contribution=None if removed is None or not value or not win_value else win_value / value - 1.0,
                untrusted=None if record is None else untrusted_reason(record, doc),
            )
        )
    return out
