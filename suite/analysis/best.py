"""The best cell of each workload, and what makes a figure trustworthy enough to be called best.

A report's "best" row is the headline people quote, so it must never be a
figure the same report flags elsewhere: a cell is crowned only when it passed,
its numerics verdict is not drift or non-finite (a loss that went non-finite
or a loss scale that collapsed disqualifies it, whatever its speed), in a
quality suite that requires it its quality verdict is "same quality" (or it is
the reference: :mod:`ampsuite.analysis.quality`), and its timing is trusted
(noise within the run's target, no instability warning).
Faster cells that were passed over are listed with the reason, so a reader
sees what the headline would have been and why it is not.

Nor may the headline crown a recipe slower than the FP32 cell it is held
against (possible when the FP32 cell itself is not trustworthy, or passed over
for another reason): such a workload's best reads "no recipe beats FP32 on this
machine" (:data:`NO_GAIN`), with the fastest trustworthy cell beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ampsuite.analysis.access import AnyDocument, is_inference, throughput, workload_id, world_size
from ampsuite.analysis.derived import Derived, derive, output_check
from ampsuite.analysis.quality import QualityVerdict, quality_reason, quality_verdicts
from ampsuite.contract.wire import Record, Status
from ampsuite.spec.screens import screened_cell

__all__ = [
    "NO_GAIN",
    "Best",
    "PassedOver",
    "baseline_lines",
    "best_per_workload",
    "measure_again",
    "numerics_reason",
    "untrusted_reason",
]

NO_GAIN = "no recipe beats FP32 on this machine"
"""What a headline says instead of crowning a cell slower than its FP32 reference."""

PassedOver = tuple[str, float, str]
"""(cell id, throughput, why it was not chosen) of a cell faster than the best one."""


def numerics_reason(record: Record, derived: Derived) -> str | None:
    """Why ``record``'s training is not healthy (None when it is): not passed, a non-finite
    loss, a collapsed loss scale, or a loss that drifted from FP32's beyond the tolerance.

    The numerics half of :func:`untrusted_reason`; ``ampsuite tune`` judges its short
    screening measurements by it alone (they are too short to meet the noise target).
    """
    if record["status"] != Status.PASSED:
        return f"status {record['status']}"
    numerics = record.get("numerics") or {}
    if derived.numerics_verdict == "non-finite":
        step = numerics.get("nonfinite_step")
        what = numerics.get("nonfinite_what") or "loss"
        return f"{what} went non-finite" + ("" if step is None else f" at step {step}")
    collapsed = numerics.get("scale_collapsed_step")
    if collapsed is not None:
        return f"loss scale collapsed at step {collapsed}"
    check = output_check(record)
    if derived.numerics_verdict == "drift" and check is not None:
        return (
            f"output's relative error {check.get('rel_error'):.2e} against {check.get('reference')} "
            f"above tolerance {check.get('tolerance'):.0e}"
        )
    if derived.numerics_verdict == "drift":
        diff = derived.loss_rel_diff
        return "loss drifted from FP32" + ("" if diff is None else f" by {diff:.2%}")
    return None


SCREEN = "a tune screen: a short measurement that ranks candidates, not a figure to quote"
"""Why a screen's record is never best: ``ampsuite tune`` takes its figure to pick finalists, each of which it then
measures in full (a report of a tune's results file holds both)."""


def _reason(record: Record, derived: Derived, quality: str | None = None) -> str | None:
    if screened_cell(str(record["id"])) is not None:
        return SCREEN
    reason = numerics_reason(record, derived) or quality
    if reason is not None:
        return reason
    if not derived.trusted:
        return derived.trust_note or "timing not trusted"
    return None


def untrusted_reason(record: Record, doc: AnyDocument, derived: Mapping[str, Derived] | None = None) -> str | None:
    """Why ``record``'s figure must not be quoted as a result, or None when it may.

    None only for a cell that passed, whose numerics verdict is "ok" or "n/a"
    (no FP32 cell to hold it against; not evidence of a problem) and never
    non-finite or drift, whose GradScaler scale did not collapse, and whose
    noise is within the run's noise target without an instability warning.
    ``derived`` is :func:`derive` of ``doc`` when the caller already has it.
    """
    figures = derived if derived is not None else derive(doc)
    own = figures.get(record["id"]) or Derived(record["id"])
    return _reason(record, own, _quality_reason(record, doc))


def _quality_reason(
    record: Record, doc: AnyDocument, verdicts: Mapping[str, QualityVerdict] | None = None
) -> str | None:
    """:func:`ampsuite.analysis.quality.quality_reason`, for the training cells a quality verdict can judge."""
    if is_inference(record):
        return None
    return quality_reason(record, doc, quality_verdicts(doc) if verdicts is None else verdicts)


@dataclass(frozen=True)
class Best:
    """A workload's fastest trustworthy cell, and the faster cells that were passed over.

    ``record`` and ``derived`` are None when no passed cell of the workload is
    trustworthy; ``passed_over`` then lists every passed cell, fastest first.
    """

    record: Record | None
    derived: Derived | None
    passed_over: list[PassedOver] = field(default_factory=list)

    @property
    def beats_fp32(self) -> bool:
        """False when the chosen cell is slower than the FP32 cell it is held against (the headline then reads
        :data:`NO_GAIN`); True otherwise, also when there is no FP32 cell to hold it against."""
        speedup = None if self.derived is None else self.derived.speedup_vs_fp32
        return speedup is None or speedup >= 1.0

    @property
    def headline(self) -> str | None:
        """:data:`NO_GAIN` when the chosen cell does not beat FP32, else None (the cell is the headline)."""
        return None if self.record is None or self.beats_fp32 else NO_GAIN


def best_per_workload(doc: AnyDocument) -> dict[str, Best]:
    """Per workload id (in matrix order): the trustworthy passed cell with the highest throughput.

    Inference cells compete among themselves, under ``"ID (inference)"``.
    Ties keep the earlier cell in matrix order. Workloads without a passed
    cell are absent; see :func:`untrusted_reason` for what trustworthy means.
    """
    derived = derive(doc)
    verdicts = quality_verdicts(doc)
    timed: dict[str, list[tuple[float, Record]]] = {}
    for record in doc["cells"]:
        value = throughput(record)
        if value is not None:
            key = workload_id(record) + (" (inference)" if is_inference(record) else "")
            timed.setdefault(key, []).append((value, record))
    out: dict[str, Best] = {}
    for workload, cells in timed.items():
        # Stable sort: equal throughputs keep matrix order, so a tie keeps the earlier cell.
        ranked = sorted(cells, key=lambda item: -item[0])
        passed_over: list[PassedOver] = []
        chosen: Record | None = None
        for value, record in ranked:
            why = _reason(record, derived[record["id"]], _quality_reason(record, doc, verdicts))
            if why is None:
                chosen = record
                break
            passed_over.append((record["id"], value, why))
        out[workload] = Best(chosen, None if chosen is None else derived[chosen["id"]], passed_over)
    return out


def measure_again(doc: AnyDocument) -> list[str]:
    """Cells to measure again, with more processes, before a headline is chosen: per workload, the fastest
    passed cell when its figure is untrusted for its timing alone (noise, instability; numerics rule a cell out
    for good), with the FP32 cell it is held against, so that the two are measured under the same rule.

    Data-parallel cells are left out: several processes pool only single-process cells. Ids in matrix order.
    """
    derived = derive(doc)
    wanted: set[str] = set()
    fastest: dict[str, tuple[float, Record]] = {}
    for record in doc["cells"]:
        value = throughput(record)
        if value is None or world_size(record) > 1:
            continue
        key = workload_id(record) + (" (inference)" if is_inference(record) else "")
        if key not in fastest or value > fastest[key][0]:
            fastest[key] = (value, record)
    for _, record in fastest.values():
        own = derived[record["id"]]
        if own.trusted or numerics_reason(record, own) is not None:
            continue
        wanted.add(record["id"])
        if own.fp32_id is not None:
            wanted.add(own.fp32_id)
    return [r["id"] for r in doc["cells"] if r["id"] in wanted]


def baseline_lines(doc: AnyDocument) -> list[str]:
    """One line per baseline saying what it is: the combination and the techniques it ran with.

    A "x FP32" figure is only as fair as its FP32 cell, so the report names what that
    cell did (cudnn-benchmark on, in the tuned default suites) rather than calling it "FP32".
    """
    cells = [r for r in doc.get("cells") or [] if not is_inference(r)]
    suite_baseline = ((doc.get("run") or {}).get("suite") or {}).get("baseline")

    def names(record: Mapping[str, object]) -> list[str]:
        return [str(t["name"]) for t in record.get("techniques") or []]  # type: ignore[attr-defined]

    fp32 = next((r for r in cells if r.get("combination") == suite_baseline), None)
    if fp32 is None:
        return []
    base = names(fp32)
    tf32 = next((r for r in cells if sorted(names(r)) == sorted([*base, "tf32"])), None)
    with_what = f" with {', '.join(base)}" if base else " with PyTorch's defaults"
    lines = [f"\u00d7FP32: against the {fp32.get('combination')} cell, float32{with_what}."]
    if tf32 is not None:
        extra = f", {', '.join(base)}" if base else ""
        lines.append(f"\u00d7TF32: against the {tf32.get('combination')} cell, float32 with TF32 matmuls{extra}.")
    return lines
