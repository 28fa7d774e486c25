"""Derived figures from results documents: speedups, memory saving, numerics verdicts, comparisons, history.

Everything here is a pure function over the plain-data results format of
docs/architecture.md ("Results file (version 1)"), except :func:`history`,
which may read an asv results directory. The report, the Markdown summary and
the CSV export all take their figures from here, so that a number means the
same thing wherever it is shown.

Comparable configuration
    Cells that differ only in their technique combination: same workload id,
    same workload options, same batch size, same device, same world size. Within such a group
    the *FP32* cell is the one without techniques, the *TF32* cell the one whose
    techniques are exactly ``["tf32"]``, and the *baseline* cell the one whose
    ``combination`` equals the records' ``baseline``. Speedups are ratios of
    median step times (reference / cell), so 2.0 means "twice as fast".

Numerics verdict
    ``"non-finite"`` when the cell's own loss went non-finite (or its gradients
    did without a GradScaler to skip those steps); ``"n/a"`` when the cell did
    not pass or there is no passed FP32 cell with a finite loss to hold it
    against; otherwise ``"drift"`` when ``|loss_at_n - fp32| / |fp32|`` exceeds
    ``run.suite.numerics_tolerance`` (default 0.05) and ``"ok"`` when it does not.

Scaling efficiency (data-parallel cells, suite-file ``gpus``)
    For a cell of world size N > 1: its total throughput / (N x the throughput
    of the *one-process cell* of the same workload id, workload options,
    device, combination (same techniques and options) and batch size per
    process). 1.0 is perfect scaling. Speedups and the numerics verdict
    compare cells of the same world size only (the world size is part of the
    comparable configuration).

Compare rule (see :func:`compare`)
    A change in median step time counts only when it exceeds
    ``max(2 * noise_a, 2 * noise_b, 1%)`` *and* the two cells' interquartile
    ranges do not overlap.
"""

from __future__ import annotations

import ast
import datetime as _dt
import itertools
import json
import math
import os
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

__all__ = [
    "DEFAULT_NOISE_TARGET",
    "DEFAULT_NUMERICS_TOLERANCE",
    "FAILURE_STATUSES",
    "MIN_RELATIVE_CHANGE",
    "STATUSES",
    "Best",
    "Comparison",
    "Derived",
    "HistoryPoint",
    "best_per_workload",
    "combination_label",
    "compare",
    "data_parallel",
    "derive",
    "group_key",
    "history",
    "instability_warnings",
    "is_nonfinite",
    "median_seconds",
    "as_mapping",
    "noise",
    "noise_target",
    "numerics_tolerance",
    "passed",
    "peak_tflops",
    "status_counts",
    "technique_names",
    "throughput",
    "throughput_per_gpu",
    "workload_id",
    "world_size",
]

Record = Mapping[str, Any]
Doc = Mapping[str, Any]
Verdict = Literal["ok", "drift", "non-finite", "n/a"]
CompareVerdict = Literal["improved", "regressed", "same", "not comparable", "missing"]

STATUSES: tuple[str, ...] = ("passed", "skipped", "failed", "oom", "timeout", "crashed", "interrupted")
"""Every terminal status, in the order reports list them."""

FAILURE_STATUSES = frozenset({"failed", "oom", "timeout", "crashed"})
"""Statuses that mean the configuration itself broke (not skipped, not interrupted by the user)."""

DEFAULT_NOISE_TARGET = 0.01
"""Relative noise of the median above which a figure is not trusted, when the run does not say."""

DEFAULT_NUMERICS_TOLERANCE = 0.05
"""Relative loss difference from FP32 allowed, when the suite does not say."""

MIN_RELATIVE_CHANGE = 0.01
"""Smallest relative change in step time that :func:`compare` reports, whatever the noise:
within-run noise does not capture run-to-run drift (clocks, temperature, neighbours)."""

_INSTABILITY = re.compile(r"unstab|instab|throttl|noisy|noise", re.IGNORECASE)
"""Warnings that say a cell's timing cannot be trusted (the core's measure/probe warnings)."""


# ---------------------------------------------------------------------------
# reading records
# ---------------------------------------------------------------------------


def _num(value: Any) -> float | None:
    """A finite float, or None for anything else (missing, null, bool, NaN, text)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    result = float(value)
    return result if math.isfinite(result) else None


def as_mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one: records of cells that did not pass
    hold nulls or nothing where passed cells hold objects."""
    return value if isinstance(value, Mapping) else {}


def _metrics(record: Record) -> Mapping[str, Any]:
    metrics = record.get("metrics")
    return metrics if isinstance(metrics, Mapping) else {}


def _step_time(record: Record) -> Mapping[str, Any]:
    step_time = _metrics(record).get("step_time")
    return step_time if isinstance(step_time, Mapping) else {}


def _numerics(record: Record) -> Mapping[str, Any]:
    numerics = record.get("numerics")
    return numerics if isinstance(numerics, Mapping) else {}


def passed(record: Record) -> bool:
    return record.get("status") == "passed"


def median_seconds(record: Record) -> float | None:
    """The median step time of a passed cell, or None."""
    value = _num(_step_time(record).get("median"))
    return value if passed(record) and value is not None and value > 0 else None


def noise(record: Record) -> float | None:
    """The relative noise of the median step time (a fraction), or None."""
    return _num(_step_time(record).get("noise"))


def throughput(record: Record) -> float | None:
    """Samples per second in the workload's unit, for a passed cell."""
    value = _num(_metrics(record).get("throughput"))
    return value if passed(record) else None


def throughput_per_gpu(record: Record) -> float | None:
    """Samples per second per process of a passed cell: ``metrics.throughput_per_gpu`` of a
    data-parallel cell (total / world size, recorded by :mod:`suite.run.launcher`), the
    throughput itself of a one-process cell."""
    if world_size(record) == 1:
        return throughput(record)
    value = _num(_metrics(record).get("throughput_per_gpu"))
    return value if passed(record) else None


def technique_names(record: Record) -> tuple[str, ...]:
    return tuple(str(t.get("name")) for t in record.get("techniques") or [] if isinstance(t, Mapping))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _workload(record: Record) -> Mapping[str, Any]:
    workload = record.get("workload")
    return workload if isinstance(workload, Mapping) else {}


def workload_id(record: Record) -> str:
    return str(_workload(record).get("id", ""))


def world_size(record: Record) -> int:
    """The processes (GPUs) the cell ran data-parallel on; 1 for records written before ``world_size`` existed."""
    value = record.get("world_size")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def data_parallel(doc: Doc) -> bool:
    """Whether the run holds a data-parallel cell (world size > 1): reports then show scaling figures."""
    return any(world_size(record) > 1 for record in doc.get("cells") or [])


GroupKey = tuple[str, str, Any, Any, int]


def group_key(record: Record) -> GroupKey:
    """The comparable configuration of a cell: workload id, workload options, batch size, device, world size."""
    workload = _workload(record)
    return (
        str(workload.get("id", "")),
        _canonical(workload.get("options") or {}),
        record.get("batch_size"),
        record.get("device"),
        world_size(record),
    )


def numerics_tolerance(doc: Doc) -> float:
    """``run.suite.numerics_tolerance``, or :data:`DEFAULT_NUMERICS_TOLERANCE`."""
    suite = (doc.get("run") or {}).get("suite") or {}
    value = _num(suite.get("numerics_tolerance"))
    return DEFAULT_NUMERICS_TOLERANCE if value is None or value < 0 else value


def noise_target(doc: Doc) -> float:
    """``run.measure.noise_target``, or :data:`DEFAULT_NOISE_TARGET` when the run does not record it."""
    measure = (doc.get("run") or {}).get("measure") or {}
    value = _num(measure.get("noise_target")) if isinstance(measure, Mapping) else None
    return DEFAULT_NOISE_TARGET if value is None or value <= 0 else value


def peak_tflops(doc: Doc, dtype: str | None) -> float | None:
    """The measured matmul peak of the run's device for ``dtype`` (``environment.peaks``)."""
    peaks = (doc.get("environment") or {}).get("peaks")
    if not isinstance(peaks, Mapping) or dtype is None:
        return None
    table = peaks.get("matmul_tflops")
    value = _num(table.get(dtype)) if isinstance(table, Mapping) else None
    return value if value is not None and value > 0 else None


# ---------------------------------------------------------------------------
# derived figures of one run
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Derived:
    """The figures of one cell that need other cells or the environment.

    Ratios are None when either side is missing or did not pass.

    Attributes:
        tflops: achieved TFLOP/s (the record's, else ``flops_per_step / median``).
        mfu: ``tflops`` over the measured matmul peak for the cell's matmul dtype.
        speedup_vs_fp32: FP32 median step time / this cell's (FP32 = no technique, TF32 off).
        speedup_vs_tf32: TF32 cell's median / this cell's (TF32 = FP32 storage, TF32 matmuls).
        speedup_vs_baseline: the suite's baseline combination's median / this cell's.
        memory_saving: ``1 - peak / peak_fp32`` (same memory kind only).
        loss_rel_diff: ``|loss_at_n - fp32| / |fp32|``.
        numerics_verdict: "ok", "drift", "non-finite" or "n/a" (module docstring).
        trusted: passed, noise within the run's target, no instability warning.
        trust_note: why the figure is not trusted (None when it is).
        fp32_id, tf32_id, baseline_id: the reference cells used, when found.
        scaling_efficiency: for a data-parallel cell (world size N > 1), total
            throughput / (N x the one-process cell's throughput); None otherwise.
        single_id: the one-process cell that ``scaling_efficiency`` used.
    """

    cell_id: str
    tflops: float | None = None
    mfu: float | None = None
    speedup_vs_fp32: float | None = None
    speedup_vs_tf32: float | None = None
    speedup_vs_baseline: float | None = None
    memory_saving: float | None = None
    loss_rel_diff: float | None = None
    numerics_verdict: Verdict = "n/a"
    trusted: bool = False
    trust_note: str | None = None
    fp32_id: str | None = None
    tf32_id: str | None = None
    baseline_id: str | None = None
    scaling_efficiency: float | None = None
    single_id: str | None = None


def _ratio(reference: Record | None, record: Record) -> float | None:
    if reference is None:
        return None
    ref, own = median_seconds(reference), median_seconds(record)
    return None if ref is None or own is None else ref / own


def _tflops(record: Record) -> float | None:
    metrics = _metrics(record)
    value = _num(metrics.get("tflops"))
    if value is not None:
        return value
    flops, median = _num(metrics.get("flops_per_step")), median_seconds(record)
    return None if flops is None or median is None else flops / median / 1e12


def _memory_saving(reference: Record | None, record: Record) -> float | None:
    if reference is None or not (passed(reference) and passed(record)):
        return None
    ref_metrics, metrics = _metrics(reference), _metrics(record)
    if ref_metrics.get("memory_kind") != metrics.get("memory_kind"):
        return None
    ref, own = _num(ref_metrics.get("peak_memory_bytes")), _num(metrics.get("peak_memory_bytes"))
    return None if ref is None or own is None or ref <= 0 else 1.0 - own / ref


def is_nonfinite(record: Record) -> bool:
    """Whether the cell's training went non-finite in a way that was not handled.

    Non-finite gradients under a GradScaler (``scale_history`` present) are the
    scaler doing its job: it skips those steps and lowers the scale; the loss
    decides then.
    """
    numerics = _numerics(record)
    if not numerics:
        return False
    if numerics.get("nonfinite_what") == "loss":
        return True
    if numerics.get("nonfinite_what") == "gradients" and not numerics.get("scale_history"):
        return True
    return numerics.get("loss_at_n") is None and bool(numerics.get("losses"))


def _loss_at_n(record: Record) -> float | None:
    return _num(_numerics(record).get("loss_at_n"))


def _skipped_updates(record: Record) -> int:
    """Optimizer steps a GradScaler skipped before the last numerics loss was computed.

    ``scale_history`` starts with the scale before the first step, then one
    entry after each step; a decrease means that step's update was skipped.
    The loss of step i reflects the updates of steps 0..i-1.
    """
    numerics = _numerics(record)
    history, losses = numerics.get("scale_history"), numerics.get("losses") or []
    n = len(losses)
    if not history or len(history) != n + 1:
        return 0
    return sum(1 for a, b in itertools.pairwise(history[:n]) if b < a)


def _loss_rel_diff(reference: Record | None, record: Record) -> float | None:
    if reference is None or not (passed(reference) and passed(record)):
        return None
    ref, own = _loss_at_n(reference), _loss_at_n(record)
    # Loss scaling skips the first updates while it searches for a scale: hold
    # the cell against FP32 after the same number of applied updates.
    skipped = _skipped_updates(record)
    ref_losses = _numerics(reference).get("losses") or []
    own_n = len(_numerics(record).get("losses") or [])
    if skipped and own_n and len(ref_losses) >= own_n:
        ref = _num(ref_losses[own_n - 1 - skipped])
    if ref is None or own is None:
        return None
    if ref == 0:
        return 0.0 if own == 0 else math.inf
    return abs(own - ref) / abs(ref)


def _verdict(record: Record, reference: Record | None, diff: float | None, tolerance: float) -> Verdict:
    if not passed(record):
        return "n/a"
    if is_nonfinite(record):
        return "non-finite"
    if diff is None or reference is None or is_nonfinite(reference):
        return "n/a"
    return "drift" if diff > tolerance else "ok"


def instability_warnings(record: Record) -> list[str]:
    return [str(w) for w in record.get("warnings") or [] if _INSTABILITY.search(str(w))]


def _trust(record: Record, target: float) -> tuple[bool, str | None]:
    if not passed(record):
        return False, f"status {record.get('status')}"
    own = noise(record)
    if own is None:
        return False, "no noise estimate"
    if own > target:
        return False, f"noise {own:.2%} above target {target:.2%}"
    unstable = instability_warnings(record)
    if unstable:
        return False, unstable[0]
    return True, None


def _first(records: Iterable[Record], predicate: Callable[[Record], bool]) -> Record | None:
    return next((r for r in records if predicate(r)), None)


def _groups(doc: Doc) -> dict[GroupKey, list[Record]]:
    groups: dict[GroupKey, list[Record]] = {}
    for record in doc.get("cells") or []:
        groups.setdefault(group_key(record), []).append(record)
    return groups


def _single_key(record: Record) -> tuple[Any, ...]:
    """What a data-parallel cell shares with its one-process cell: the configuration but the world size."""
    return (*group_key(record)[:-1], record.get("combination"), _techniques_key(record))


def _scaling(singles: Mapping[tuple[Any, ...], Record], record: Record) -> tuple[float | None, str | None]:
    """(scaling efficiency, id of the one-process cell used) of a data-parallel cell."""
    n = world_size(record)
    single = singles.get(_single_key(record)) if n > 1 else None
    if single is None:
        return None, None
    total, one = throughput(record), throughput(single)
    efficiency = None if total is None or one is None or one <= 0 else total / (n * one)
    return efficiency, str(single.get("id"))


def derive(doc: Doc) -> dict[str, Derived]:
    """Every cell's derived figures, keyed by cell id (in matrix order)."""
    tolerance, target = numerics_tolerance(doc), noise_target(doc)
    derived: dict[str, Derived] = {}
    singles: dict[tuple[Any, ...], Record] = {}
    for record in doc.get("cells") or []:
        if world_size(record) == 1:
            singles.setdefault(_single_key(record), record)
    for members in _groups(doc).values():
        fp32 = _first(members, lambda r: technique_names(r) == ())
        tf32 = _first(members, lambda r: technique_names(r) == ("tf32",))
        baseline = _first(
            members, lambda r: r.get("baseline") is not None and r.get("combination") == r.get("baseline")
        )
        for record in members:
            tflops = _tflops(record) if passed(record) else None
            peak = peak_tflops(doc, _metrics(record).get("matmul_dtype"))
            diff = _loss_rel_diff(fp32, record)
            trusted, note = _trust(record, target)
            cell_id = str(record.get("id"))
            efficiency, single_id = _scaling(singles, record)
            derived[cell_id] = Derived(
                cell_id=cell_id,
                tflops=tflops,
                mfu=None if tflops is None or peak is None else tflops / peak,
                speedup_vs_fp32=_ratio(fp32, record),
                speedup_vs_tf32=_ratio(tf32, record),
                speedup_vs_baseline=_ratio(baseline, record),
                memory_saving=_memory_saving(fp32, record),
                loss_rel_diff=diff,
                numerics_verdict=_verdict(record, fp32, diff, tolerance),
                trusted=trusted,
                trust_note=note,
                fp32_id=None if fp32 is None else str(fp32.get("id")),
                tf32_id=None if tf32 is None else str(tf32.get("id")),
                baseline_id=None if baseline is None else str(baseline.get("id")),
                scaling_efficiency=efficiency,
                single_id=single_id,
            )
    order = [str(r.get("id")) for r in doc.get("cells") or []]
    return {cell_id: derived[cell_id] for cell_id in order if cell_id in derived}


@dataclass(frozen=True)
class Best:
    """The highest-throughput passed cell of a workload, with its derived figures."""

    record: Record
    derived: Derived


def best_per_workload(doc: Doc) -> dict[str, Best]:
    """Per workload id (in matrix order): the passed cell with the highest throughput.

    Ties keep the earlier cell in matrix order. Workloads without a passed cell
    are absent.
    """
    derived = derive(doc)
    best: dict[str, Best] = {}
    for record in doc.get("cells") or []:
        value = throughput(record)
        if value is None:
            continue
        key = workload_id(record)
        current = best.get(key)
        if current is None or value > (throughput(current.record) or 0.0):
            best[key] = Best(record, derived[str(record.get("id"))])
    return best


def status_counts(doc: Doc) -> dict[str, int]:
    """Cells per status: every known status (zeros kept, in :data:`STATUSES` order), then unknown ones."""
    counts = dict.fromkeys(STATUSES, 0)
    for record in doc.get("cells") or []:
        status = str(record.get("status"))
        counts[status] = counts.get(status, 0) + 1
    return counts


# ---------------------------------------------------------------------------
# comparing two runs
# ---------------------------------------------------------------------------


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
    """

    cell_id: str
    verdict: CompareVerdict
    reason: str
    a: Record | None = None
    b: Record | None = None
    change: float | None = None
    threshold: float | None = None
    throughput_ratio: float | None = None


def _quartiles(record: Record) -> tuple[float, float] | None:
    """The interquartile range of the step times: from the raw samples when recorded, else
    ``median -/+ iqr / 2`` (the record keeps the IQR's width only)."""
    step_time = _step_time(record)
    samples = [v for v in (_num(s) for s in step_time.get("samples") or []) if v is not None]
    if len(samples) >= 4:
        q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
        return q1, q3
    median, iqr = _num(step_time.get("median")), _num(step_time.get("iqr"))
    if median is None:
        return None
    half = (iqr or 0.0) / 2
    return median - half, median + half


def _gpu_name(doc: Doc) -> str | None:
    gpu = (doc.get("environment") or {}).get("gpu")
    return str(gpu.get("name")) if isinstance(gpu, Mapping) and gpu.get("name") is not None else None


def _techniques_key(record: Record) -> str:
    return _canonical([[t.get("name"), t.get("options") or {}] for t in record.get("techniques") or []])


def _incomparable(doc_a: Doc, a: Record, doc_b: Doc, b: Record) -> str | None:
    """Why two cells of the same id cannot be compared, or None."""
    checks: list[tuple[str, Any, Any]] = [
        ("batch size", a.get("batch_size"), b.get("batch_size")),
        ("device", a.get("device"), b.get("device")),
        ("world size", world_size(a), world_size(b)),
        ("workload", workload_id(a), workload_id(b)),
        (
            "workload options",
            _canonical(_workload(a).get("options") or {}),
            _canonical(_workload(b).get("options") or {}),
        ),
        ("techniques", _techniques_key(a), _techniques_key(b)),
        ("GPU", _gpu_name(doc_a), _gpu_name(doc_b)),
    ]
    dtype_a, dtype_b = _metrics(a).get("matmul_dtype"), _metrics(b).get("matmul_dtype")
    if dtype_a is not None and dtype_b is not None:
        checks.append(("matmul dtype", dtype_a, dtype_b))
    for what, left, right in checks:
        if left != right:
            return f"{what} differs: {_short(left)} vs {_short(right)}"
    return None


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else _canonical(value)
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


def _compare_cell(cell_id: str, doc_a: Doc, a: Record, doc_b: Doc, b: Record) -> Comparison:
    why = _incomparable(doc_a, a, doc_b, b)
    if why is not None:
        return Comparison(cell_id, "not comparable", why, a, b)
    sa, sb = a.get("status"), b.get("status")
    if median_seconds(a) is not None and median_seconds(b) is not None:
        return _compare_timed(cell_id, a, b)
    if sa == "passed" and sb in FAILURE_STATUSES:
        return Comparison(cell_id, "regressed", f"passed before, now {sb}", a, b)
    if sa in FAILURE_STATUSES and sb == "passed":
        return Comparison(cell_id, "improved", f"{sa} before, now passes", a, b)
    if sa == sb:
        return Comparison(cell_id, "same", f"{sa} in both runs", a, b)
    return Comparison(cell_id, "not comparable", f"no timing to compare (status {sa} vs {sb})", a, b)


def compare(doc_a: Doc, doc_b: Doc) -> list[Comparison]:
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
    cells_a = {str(r.get("id")): r for r in doc_a.get("cells") or []}
    cells_b = {str(r.get("id")): r for r in doc_b.get("cells") or []}
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


# ---------------------------------------------------------------------------
# history across commits
# ---------------------------------------------------------------------------


class HistoryPoint(NamedTuple):
    """One measurement of a cell at one commit (or run)."""

    label: str
    """The commit (12 hex digits) or, without one, the run id."""
    date: str
    """ISO 8601; the run's start for results files, the commit date for asv."""
    throughput: float
    noise: float | None


HistorySource = Doc | str | os.PathLike[str]

SECONDS_PER_SAMPLE = "seconds_per_sample"
SAMPLES_PER_SECOND = ("samples_per_second", "throughput")
NOISE = "noise"


def _iso(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _dt.datetime.fromtimestamp(value / 1000, tz=_dt.UTC).isoformat(timespec="seconds")
    return "" if value is None else str(value)


def _sort_key(point: HistoryPoint) -> tuple[float, str]:
    try:
        stamp = _dt.datetime.fromisoformat(point.date)
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=_dt.UTC)
        return stamp.timestamp(), point.label
    except ValueError:
        return math.inf, point.label


def _doc_points(doc: Doc) -> Iterable[tuple[str, str, HistoryPoint]]:
    """(source, cell id, point) for each passed cell of a results document."""
    run = doc.get("run") or {}
    env = doc.get("environment") or {}
    commit = env.get("workdir_commit")
    label = str(commit)[:12] if commit else str(run.get("id", "?"))
    source = _gpu_name(doc) or str(env.get("cpu") or env.get("hostname") or "cpu")
    for record in doc.get("cells") or []:
        value = throughput(record)
        if value is not None:
            yield source, str(record.get("id")), HistoryPoint(label, _iso(run.get("started")), value, noise(record))


def _param_value(text: Any) -> str:
    """asv stores parameter values as their ``repr``; cell ids come back as plain strings."""
    if not isinstance(text, str):
        return str(text)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return str(value)


def _asv_metric(benchmark: str) -> str | None:
    name = benchmark.rsplit(".", 1)[-1]
    if name.endswith(SECONDS_PER_SAMPLE):
        return SECONDS_PER_SAMPLE
    if name.endswith(SAMPLES_PER_SECOND):
        return "throughput"
    if NOISE in name:
        return NOISE
    return None


def _asv_file_points(data: Mapping[str, Any], path: Path) -> Iterable[tuple[str, str, HistoryPoint]]:
    if data.get("version") != 2:
        raise ValueError(f"{path}: asv results version {data.get('version')!r} is not supported (expected 2)")
    columns = list(data.get("result_columns") or [])
    machine = str((data.get("params") or {}).get("machine") or path.parent.name)
    label = str(data.get("commit_hash") or path.stem.split("-")[0])[:12]
    date = _iso(data.get("date"))
    values: dict[str, dict[str, float]] = {}
    for benchmark, row in (data.get("results") or {}).items():
        metric = _asv_metric(str(benchmark))
        fields = dict(zip(columns, row or [], strict=False))
        results, params = fields.get("result"), fields.get("params") or []
        if metric is None or not isinstance(results, list) or not params:
            continue
        for combo, value in zip(itertools.product(*params), results, strict=False):
            number = _num(value)
            if number is None:
                continue
            cell_id = "/".join(_param_value(p) for p in combo)
            values.setdefault(cell_id, {})[metric] = number
    for cell_id, found in values.items():
        per_sample = found.get(SECONDS_PER_SAMPLE)
        rate = found.get("throughput")
        if rate is None and per_sample is not None and per_sample > 0:
            rate = 1.0 / per_sample
        if rate is not None:
            yield machine, cell_id, HistoryPoint(label, date, rate, found.get(NOISE))


def _asv_points(root: Path) -> Iterable[tuple[str, str, HistoryPoint]]:
    for path in sorted(root.rglob("*.json")):
        if path.name in ("machine.json", "benchmarks.json"):
            continue
        with path.open(encoding="utf-8") as fh:
            data = json.load(fh)
        if isinstance(data, Mapping) and "commit_hash" in data and "results" in data:
            yield from _asv_file_points(data, path)


def _path_points(path: Path) -> Iterable[tuple[str, str, HistoryPoint]]:
    if path.is_dir():
        yield from _asv_points(path)
        return
    with path.open(encoding="utf-8") as fh:
        data = json.load(fh)
    if isinstance(data, Mapping) and data.get("format") == "ampsuite-results":
        yield from _doc_points(data)
    elif isinstance(data, Mapping) and "commit_hash" in data:
        yield from _asv_file_points(data, path)
    else:
        raise ValueError(f"{path}: neither an ampsuite results file nor an asv results file")


def history(sources: HistorySource | Iterable[HistorySource]) -> dict[str, list[HistoryPoint]]:
    """Throughput of each cell across commits, oldest first.

    ``sources`` is one or several of: a loaded ampsuite results document; a
    path to a results file; a path to an asv results directory (``results/``,
    or one machine's folder in it) or to one asv results file.

    From results documents: one point per passed cell, labelled by
    ``environment.workdir_commit`` (else ``run.id``), dated ``run.started``.

    From asv (results format version 2: ``result_columns`` naming the columns
    of each ``results[benchmark]`` row; ``params`` a list of parameter lists
    holding ``repr`` strings; ``result`` the values over their Cartesian product
    in ``itertools.product`` order; ``commit_hash``; ``date`` in ms since the
    epoch; ``params.machine``): benchmarks whose last dotted name part ends in
    ``seconds_per_sample`` give throughput ``1 / value``; ending in
    ``samples_per_second`` or ``throughput`` give it directly; containing
    ``noise`` give the relative noise. The parameter values, joined by ``/``,
    are the cell id (ampsuite's asv benchmarks take the cell id as their one
    parameter). Failed entries (null, NaN) are left out.

    Keys are cell ids. When the points come from more than one machine (asv
    machine name, or GPU name for results files), each key is suffixed with
    ``" @ <machine>"`` so that no line mixes hardware.
    """
    items: list[HistorySource] = [sources] if isinstance(sources, Mapping | str | os.PathLike) else list(sources)
    found: list[tuple[str, str, HistoryPoint]] = []
    for item in items:
        if isinstance(item, Mapping):
            found.extend(_doc_points(item))
        else:
            found.extend(_path_points(Path(item)))
    several = len({source for source, _, _ in found}) > 1
    out: dict[str, list[HistoryPoint]] = {}
    for source, cell_id, point in found:
        out.setdefault(f"{cell_id} @ {source}" if several else cell_id, []).append(point)
    return {key: sorted(points, key=_sort_key) for key, points in sorted(out.items())}


def combination_label(record: Record) -> str:
    """The combination's display name: the record's ``combination``, else its technique names, else "fp32"."""
    combination = record.get("combination")
    if isinstance(combination, str) and combination:
        return combination
    if isinstance(combination, Sequence) and not isinstance(combination, str) and combination:
        return "+".join(str(c) for c in combination)
    names = technique_names(record)
    return "+".join(names) if names else "fp32"
