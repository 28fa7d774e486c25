"""Comparing two runs of the same suite, cell id by cell id (see :func:`compare`).

Compare rule
    A change in median step time counts only when it exceeds
    ``max(2 * noise_a, 2 * noise_b, 1%)`` *and* the two cells' interquartile
    ranges do not overlap.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from ampsuite.analysis.access import (
    FAILURE_STATUSES,
    AnyDocument,
    canonical,
    finite,
    gpu_name,
    median_seconds,
    noise,
    techniques_key,
    throughput,
    workload_id,
    world_size,
)
from ampsuite.analysis.machines import beside, record_machine
from ampsuite.contract.wire import Record, Status

__all__ = ["MIN_RELATIVE_CHANGE", "CompareVerdict", "Comparison", "compare", "regressions", "same_run"]

CompareVerdict = Literal["improved", "regressed", "same", "not comparable", "missing"]

MIN_RELATIVE_CHANGE = 0.01
"""Smallest relative change in step time that :func:`compare` reports, whatever the noise:
within-run noise does not capture run-to-run drift (clocks, temperature, neighbours)."""


@dataclass(frozen=True)
class Comparison:
    """One cell id across two runs: run A (the reference) and run B (the new one).

    Attributes:
        verdict: "improved" / "regressed" / "same" / "not comparable" / "missing".
        reason: one line saying why (always set).
        change: relative change of the median step time, ``b / a - 1``
            (negative = B is faster), when both passed.
        threshold: the smallest ``|change|`` that would have counted.
        throughput_ratio: B's throughput / A's.
        beside: whether the two records were measured on one machine
            (:func:`ampsuite.analysis.machines.beside`); a change between two machines is the machines' as much
            as the code's, and the reason says so.
    """

    cell_id: str
    verdict: CompareVerdict
    reason: str
    a: Record | None = None
    b: Record | None = None
    change: float | None = None
    threshold: float | None = None
    throughput_ratio: float | None = None
    beside: bool | None = None


def _quartiles(record: Record) -> tuple[float, float] | None:
    """The interquartile range of the step times: from the raw samples when recorded, else
    ``median -/+ iqr / 2`` (the record keeps the IQR's width only)."""
    step_time = record.get("metrics", {}).get("step_time")
    if step_time is None:
        return None
    samples = [v for v in (finite(s) for s in step_time.get("samples") or []) if v is not None]
    if len(samples) >= 4:
        q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
        return q1, q3
    median, iqr = finite(step_time.get("median")), finite(step_time.get("iqr"))
    if median is None:
        return None
    half = (iqr or 0.0) / 2
    return median - half, median + half


def _incomparable(doc_a: AnyDocument, a: Record, doc_b: AnyDocument, b: Record) -> str | None:
    """Why two cells of the same id cannot be compared, or None."""
    checks: list[tuple[str, Any, Any]] = [
        ("batch size", a["batch_size"], b["batch_size"]),
        ("device", a["device"], b["device"]),
        ("world size", world_size(a), world_size(b)),
        ("workload", workload_id(a), workload_id(b)),
        (
            "workload options",
            canonical(a["workload"]["options"]),
            canonical(b["workload"]["options"]),
        ),
        ("techniques", techniques_key(a), techniques_key(b)),
        ("GPU", gpu_name(doc_a), gpu_name(doc_b)),
    ]
    dtype_a, dtype_b = a["metrics"].get("matmul_dtype"), b["metrics"].get("matmul_dtype")
    if dtype_a is not None and dtype_b is not None:
        checks.append(("matmul dtype", dtype_a, dtype_b))
    for what, left, right in checks:
        if left != right:
            return f"{what} differs: {_short(left)} vs {_short(right)}"
    return None


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else canonical(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _compare_timed(cell_id: str, a: Record, b: Record) -> Comparison:
    ma, mb = median_seconds(a), median_seconds(b)
    assert ma is not None and mb is not None
    change = mb / ma - 1.0
    threshold = max(2 * (noise(a) or 0.0), 2 * (noise(b) or 0.0), MIN_RELATIVE_CHANGE)
    ta, tb = throughput(a), throughput(b)
    ratio = None if ta is None or tb is None or ta == 0 else tb / ta
    qa, qb = _quartiles(a), _quartiles(b)
    disjoint = qa is not None and qb is not None and (qa[1] < qb[0] or qb[1] < qa[0])
    if abs(change) <= threshold:
        verdict: CompareVerdict = "same"
        reason = f"step time {change:+.2%}, within the threshold {threshold:.2%}"
    elif not disjoint:
        verdict = "same"
        reason = f"step time {change:+.2%}, but the interquartile ranges overlap"
    else:
        verdict = "improved" if change < 0 else "regressed"
        reason = f"step time {change:+.2%} (threshold {threshold:.2%}, interquartile ranges apart)"
    return Comparison(cell_id, verdict, reason, a, b, change, threshold, ratio)


def _compare_cell(cell_id: str, doc_a: AnyDocument, a: Record, doc_b: AnyDocument, b: Record) -> Comparison:
    why = _incomparable(doc_a, a, doc_b, b)
    if why is not None:
        return Comparison(cell_id, "not comparable", why, a, b)
    sa, sb = a["status"], b["status"]
    if median_seconds(a) is not None and median_seconds(b) is not None:
        timed = _compare_timed(cell_id, a, b)
        if record_machine(a) is None or record_machine(b) is None:
            return timed
        if beside(a, b):
            return dataclasses.replace(timed, beside=True)
        return dataclasses.replace(timed, beside=False, reason=f"{timed.reason}; measured on two machines")
    if sa == Status.PASSED and sb in FAILURE_STATUSES:
        return Comparison(cell_id, "regressed", f"passed before, now {sb}", a, b)
    if sa in FAILURE_STATUSES and sb == Status.PASSED:
        return Comparison(cell_id, "improved", f"{sa} before, now passes", a, b)
    if sa == sb:
        return Comparison(cell_id, "same", f"{sa} in both runs", a, b)
    return Comparison(cell_id, "not comparable", f"no timing to compare (status {sa} vs {sb})", a, b)


def compare(doc_a: AnyDocument, doc_b: AnyDocument) -> list[Comparison]:
    """Compare run B against run A (the reference), cell id by cell id.

    Order: B's cells in matrix order, then the cells only A has.

    Rule: when both cells passed and their configuration is the same, the
    relative change of the median step time, ``b / a - 1``, counts as a change
    only when it exceeds ``max(2 * noise_a, 2 * noise_b, 1%)`` and the two
    interquartile ranges (from the raw samples, else ``median -/+ iqr / 2``)
    do not overlap. Each cell's ``noise`` is the relative uncertainty of its
    median that the core's stopping rule estimated, so twice the larger one is
    a two-sigma bound; the 1% floor covers run-to-run drift that within-run
    noise cannot see; the IQR test keeps a shifted tail from passing for a
    shifted bulk. A cell that passed in A and failed/oom/timed out/crashed in B
    is a regression (and the reverse an improvement). Cells whose batch size,
    device, workload options, techniques (names and options), matmul dtype or
    GPU name differ are "not comparable", with the difference as the reason.
    """
    cells_a: dict[str, Record] = {r["id"]: r for r in doc_a["cells"]}
    cells_b: dict[str, Record] = {r["id"]: r for r in doc_b["cells"]}
    out: list[Comparison] = []
    for cell_id, b in cells_b.items():
        a = cells_a.get(cell_id)
        if a is None:
            out.append(Comparison(cell_id, "missing", "only in the new run", None, b))
        else:
            out.append(_compare_cell(cell_id, doc_a, a, doc_b, b))
    for cell_id, a in cells_a.items():
        if cell_id not in cells_b:
            out.append(Comparison(cell_id, "missing", "only in the reference run", a, None))
    return out


def regressions(comparisons: Iterable[Comparison], min_change: float | None = None) -> list[Comparison]:
    """The comparisons that fail a regression gate (``ampsuite report --fail-on-regression``).

    A cell fails when :func:`compare` calls it regressed (the noise-aware rule) and, given ``min_change``
    (a fraction: 0.05 for 5%), its step time grew by more than that too: a threshold can only raise the bar
    the noise sets, never call noise a regression. A cell that passed before and fails now (no step time to
    weigh) fails the gate whatever ``min_change`` says.
    """
    return [
        c
        for c in comparisons
        if c.verdict == "regressed" and (min_change is None or c.change is None or c.change > min_change)
    ]


def same_run(doc_a: AnyDocument, doc_b: AnyDocument) -> bool:
    """Whether two documents hold the same run, record for record: a comparison of them can show no change."""
    return canonical(doc_a) == canonical(doc_b)
