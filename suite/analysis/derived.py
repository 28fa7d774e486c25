"""Figures of one cell that need other cells or the environment: speedups, MFU, memory saving, numerics verdict.

Everything here is a pure function over the results format of
docs/architecture.md ("Results file (version 1)"). The report, the Markdown
summary, the CSV export and the terminal table all take their figures from
here, so that a number means the same thing wherever it is shown.

References (within one comparable configuration, :func:`ampsuite.analysis.group_key`)
    The *FP32* cell is the tuned one a practitioner would run: the one whose
    techniques are exactly the suite's ``base_techniques`` (``cudnn-benchmark``
    in the default CUDA suite), failing that the one without techniques; the
    *TF32* cell likewise has the base techniques and ``tf32`` (failing that
    ``["tf32"]`` alone); the *baseline* cell is the one whose ``combination``
    equals the records' ``baseline``. Records do not mark base techniques as
    such: they are read off the training baseline cell (the cell whose
    combination is the suite's ``baseline``), less ``tf32``, provided its
    matmuls ran in float32 (:func:`_base_names`). So with ``base_techniques =
    ["cudnn-benchmark"]`` a ``fp32-defaults = ["-cudnn-benchmark"]`` row is an
    extra row held against the tuned FP32, not the reference. For a workload
    with a precision option (GEMM's ``dtype``) the FP32 and TF32 cells are those
    whose option is ``float32``: a bfloat16 product is held against the float32
    product of the same shape. Speedups are ratios of median step times
    (reference / cell), so 2.0 means "twice as fast".

Inference cells (records with ``notes.inference``, :func:`ampsuite.analysis.is_inference`)
    form groups of their own: training and inference cells are never
    compared. In an inference group the technique that made the cells
    inference cells (``notes.inference.technique``) does not count, so the
    FP32 inference cell is the one whose other techniques are the base
    techniques read off the training baseline cell of the same configuration
    (``["cudnn-benchmark", "inference"]`` in the default CUDA suite), failing
    that the one whose only technique is the inference technique; an
    inference cell's speedups are against FP32 *inference*.

Numerics verdict
    ``"non-finite"`` when the cell's own loss went non-finite (or its gradients
    did without a GradScaler to skip those steps); ``"n/a"`` when the cell did
    not pass or there is no passed FP32 cell with a finite loss to hold it
    against; otherwise ``"drift"`` when ``|loss_at_n - fp32| / |fp32|`` exceeds
    ``run.suite.numerics_tolerance`` (default 0.05) and ``"ok"`` when it does not.
    A cell whose workload checks its own output (``numerics.output_check``: GEMM's
    product against float64, whose loss is one element of that product) is judged
    by that check alone: ``"ok"`` when its ``rel_error`` is within its
    ``tolerance``, else ``"drift"``.

Model FLOPs and MFU as LLM training reports it (cells whose workload declares ``model_flops_per_step``)
    ``model_tflops`` = model FLOPs per step / median (per GPU in a data-parallel cell, like ``tflops``);
    ``mfu_datasheet`` = that over the GPU's published dense bf16 peak (:mod:`ampsuite.analysis.datasheet`),
    ``mfu_measured`` = over the bf16 matmul peak measured on the machine (``environment.peaks``), whatever the
    cell's own precision: ``mfu_basis`` is ``"bf16"`` for a cell whose products ran in 16 bits and
    ``"bf16-equivalent"`` otherwise (FP8, TF32, FP32).

Scaling efficiency (data-parallel cells, suite-file ``gpus``)
    For a cell of world size N > 1: its total throughput / (N x the throughput
    of the *one-process cell* of the same workload id, workload options,
    device, combination (same techniques and options) and batch size per
    process). 1.0 is perfect scaling. Speedups and the numerics verdict
    compare cells of the same world size only (the world size is part of the
    comparable configuration).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ampsuite.analysis.access import (
    REFERENCE_PRECISION,
    AnyDocument,
    GroupKey,
    copy_bytes_per_s,
    dram_bytes_per_s,
    finite,
    group_key,
    instability_warnings,
    median_seconds,
    noise,
    noise_target,
    numerics_tolerance,
    passed,
    peak_tflops,
    precision_value,
    reference_names,
    technique_names,
    techniques_key,
    throughput,
    waiting_note,
    world_size,
)
from ampsuite.analysis.datasheet import datasheet_bf16_tflops, environment_gpu_name
from ampsuite.contract.wire import Record

__all__ = ["Derived", "Verdict", "derive", "is_nonfinite", "output_check", "skipped_updates"]

Verdict = Literal["ok", "drift", "non-finite", "n/a"]


@dataclass(frozen=True)
class Derived:
    """The figures of one cell that need other cells or the environment.

    Ratios are None when either side is missing or did not pass.

    Attributes:
        tflops: achieved TFLOP/s (the record's, else ``flops_per_step / median``).
        mfu: ``tflops`` over the measured matmul peak for the cell's matmul dtype.
        bandwidth_util: achieved DRAM throughput over the timed steps (NVML GPM, the clocks probe) over the
            device's measured copy bandwidth (bytes read + written), the memory-side twin of ``mfu``.
        speedup_vs_fp32: FP32 median step time / this cell's (FP32 = no technique, TF32 off,
            float32 in the workload's precision option where it has one).
        speedup_vs_tf32: TF32 cell's median / this cell's (TF32 = FP32 storage, TF32 matmuls).
        speedup_vs_baseline: the suite's baseline combination's median / this cell's.
        memory_saving: ``1 - peak / peak_fp32`` (same memory kind only).
        loss_rel_diff: ``|loss_at_n - fp32| / |fp32|``; None for a cell judged by its own output check.
        numerics_verdict: "ok", "drift", "non-finite" or "n/a" (module docstring).
        trusted: passed, noise within the run's target, no instability warning.
        trust_note: why the figure is not trusted (None when it is).
        fp32_id, tf32_id, baseline_id: the reference cells used, when found.
        scaling_efficiency: for a data-parallel cell (world size N > 1), total
            throughput / (N x the one-process cell's throughput); None otherwise.
        single_id: the one-process cell that ``scaling_efficiency`` used.
        model_tflops: the workload's declared model FLOPs per step / median, in TFLOP/s.
        mfu_datasheet: ``model_tflops`` over the GPU's published dense bf16 peak.
        mfu_measured: ``model_tflops`` over the machine's measured bf16 matmul peak.
        mfu_basis: ``"bf16"`` or ``"bf16-equivalent"`` (the cell's products were not 16-bit), with model FLOPs.
    """

    cell_id: str
    tflops: float | None = None
    mfu: float | None = None
    bandwidth_util: float | None = None
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
    model_tflops: float | None = None
    mfu_datasheet: float | None = None
    mfu_measured: float | None = None
    mfu_basis: str | None = None


def _ratio(reference: Record | None, record: Record) -> float | None:
    if reference is None:
        return None
    ref, own = median_seconds(reference), median_seconds(record)
    return None if ref is None or own is None else ref / own


def _tflops(record: Record) -> float | None:
    metrics = record.get("metrics", {})
    value = finite(metrics.get("tflops"))
    if value is not None:
        return value
    flops, median = finite(metrics.get("flops_per_step")), median_seconds(record)
    return None if flops is None or median is None else flops / median / 1e12


HALF_PRECISION = ("bfloat16", "float16")
"""Matmul dtypes whose cells' model MFU is plain "bf16" (float16's Tensor Core peak is bf16's); others: equivalent."""


def _model_mfu(doc: AnyDocument, record: Record) -> dict[str, Any]:
    """The model-FLOPs figures of a passed cell whose workload declared them (module docstring)."""
    metrics = record.get("metrics", {})
    flops, median = finite(metrics.get("model_flops_per_step")), median_seconds(record)
    if flops is None or median is None:
        return {}
    tflops = flops / median / 1e12
    datasheet, measured = datasheet_bf16_tflops(environment_gpu_name(doc)), peak_tflops(doc, "bfloat16")
    return {
        "model_tflops": tflops,
        "mfu_datasheet": None if datasheet is None else tflops / datasheet,
        "mfu_measured": None if measured is None else tflops / measured,
        "mfu_basis": "bf16"
        if metrics.get("matmul_dtype") in HALF_PRECISION and "fp8" not in technique_names(record)
        else "bf16-equivalent",
    }


def _memory_saving(reference: Record | None, record: Record) -> float | None:
    if reference is None or not (passed(reference) and passed(record)):
        return None
    ref_metrics, metrics = reference.get("metrics", {}), record.get("metrics", {})
    if ref_metrics.get("memory_kind") != metrics.get("memory_kind"):
        return None
    ref, own = finite(ref_metrics.get("peak_memory_bytes")), finite(metrics.get("peak_memory_bytes"))
    return None if ref is None or own is None or ref <= 0 else 1.0 - own / ref


def is_nonfinite(record: Record) -> bool:
    """Whether the cell's training went non-finite in a way that was not handled.

    Non-finite gradients under a GradScaler (``scale_history`` present) are the
    scaler doing its job: it skips those steps and lowers the scale; the loss
    decides then.
    """
    numerics = record.get("numerics")
    if not numerics:
        return False
    if numerics.get("nonfinite_what") == "loss":
        return True
    if numerics.get("nonfinite_what") == "gradients" and not numerics.get("scale_history"):
        return True
    return numerics.get("loss_at_n") is None and bool(numerics.get("losses"))


def _loss_at_n(record: Record) -> float | None:
    return finite((record.get("numerics") or {}).get("loss_at_n"))


def skipped_updates(record: Record) -> int:
    """Optimizer steps a GradScaler skipped before the last numerics loss was computed.

    ``scale_history`` starts with the scale before the first step, then one
    entry after each step; a decrease means that step's update was skipped.
    The loss of step i reflects the updates of steps 0..i-1.
    """
    numerics = record.get("numerics") or {}
    history, losses = numerics.get("scale_history"), numerics.get("losses") or []
    n = len(losses)
    if not history or len(history) != n + 1:
        return 0
    # A null scale (not recorded for that step) decides nothing either way.
    return sum(1 for a, b in itertools.pairwise(history[:n]) if a is not None and b is not None and b < a)


def _loss_rel_diff(reference: Record | None, record: Record) -> float | None:
    if reference is None or not (passed(reference) and passed(record)):
        return None
    ref, own = _loss_at_n(reference), _loss_at_n(record)
    # Loss scaling skips the first updates while it searches for a scale: hold
    # the cell against FP32 after the same number of applied updates.
    skipped = skipped_updates(record)
    ref_losses = (reference.get("numerics") or {}).get("losses") or []
    own_n = len((record.get("numerics") or {}).get("losses") or [])
    if skipped and own_n and len(ref_losses) >= own_n:
        ref = finite(ref_losses[own_n - 1 - skipped])
    if ref is None or own is None:
        return None
    if ref == 0:
        return 0.0 if own == 0 else math.inf
    return abs(own - ref) / abs(ref)


def output_check(record: Record) -> Mapping[str, Any] | None:
    """The record's own output check (a workload's ``check_output``, e.g. GEMM's product against float64), if any."""
    check = (record.get("numerics") or {}).get("output_check")
    return check if isinstance(check, Mapping) else None


def _verdict(record: Record, reference: Record | None, diff: float | None, tolerance: float) -> Verdict:
    if not passed(record):
        return "n/a"
    if is_nonfinite(record):
        return "non-finite"
    check = output_check(record)
    if check is not None:
        # The workload's loss is no training loss (one element of a product): its own check decides.
        error, bound = finite(check.get("rel_error")), finite(check.get("tolerance"))
        if error is None or bound is None:
            return "non-finite" if check.get("rel_error") is not None else "n/a"
        return "ok" if error <= bound else "drift"
    if diff is None or reference is None or is_nonfinite(reference):
        return "n/a"
    return "drift" if diff > tolerance else "ok"


def _trust(record: Record, target: float) -> tuple[bool, str | None]:
    if not passed(record):
        return False, f"status {record.get('status')}"
    own = noise(record)
    if own is None:
        return False, "no noise estimate"
    cause = waiting_note(record)
    if own > target:
        return False, f"noise {own:.2%} above target {target:.2%}" + (f"; {cause}" if cause else "")
    unstable = instability_warnings(record)
    if unstable:
        return False, unstable[0] + (f"; {cause}" if cause else "")
    return True, None


def _first(records: Iterable[Record], predicate: Callable[[Record], bool]) -> Record | None:
    return next((r for r in records if predicate(r)), None)


def _groups(doc: AnyDocument) -> dict[GroupKey, list[Record]]:
    groups: dict[GroupKey, list[Record]] = {}
    for record in doc["cells"]:
        groups.setdefault(group_key(record), []).append(record)
    return groups


def _single_key(record: Record) -> tuple[Any, ...]:
    """What a data-parallel cell shares with its one-process cell: the configuration but the world size."""
    return (*group_key(record)[:-2], precision_value(record), record.get("combination"), techniques_key(record))


def _scaling(singles: Mapping[tuple[Any, ...], Record], record: Record) -> tuple[float | None, str | None]:
    """(scaling efficiency, id of the one-process cell used) of a data-parallel cell."""
    n = world_size(record)
    single = singles.get(_single_key(record)) if n > 1 else None
    if single is None:
        return None, None
    total, one = throughput(record), throughput(single)
    efficiency = None if total is None or one is None or one <= 0 else total / (n * one)
    return efficiency, single["id"]


def _reference(record: Record) -> bool:
    """Whether the cell can be an FP32/TF32 reference: float32 storage where precision is an option."""
    return precision_value(record) in (None, REFERENCE_PRECISION)


def _base_names(training: Iterable[Record]) -> frozenset[str] | None:
    """The techniques of the training baseline cell that an inference FP32 reference may carry (the
    suite's base techniques, which records do not mark as such); None when that cell is not an FP32 cell."""
    baseline = _first(training, lambda r: r.get("combination") == r.get("baseline") and _reference(r))
    if baseline is None or baseline.get("metrics", {}).get("matmul_dtype") not in (None, REFERENCE_PRECISION):
        return None
    return frozenset(technique_names(baseline)) - {"tf32"}


def _reference_cell(
    members: list[Record], groups: Mapping[GroupKey, list[Record]], key: GroupKey, names: frozenset[str]
) -> Record | None:
    """The group's cell with the suite's base techniques (read off the training baseline cell,
    :func:`_base_names`) and ``names``, failing that the one with ``names`` alone (in an inference group
    the inference technique does not count either way): FP32 with no names, TF32 with ``tf32``."""
    base = _base_names(groups.get((*key[:4], False, *key[5:]), []))
    if base:
        tuned = _first(members, lambda r: frozenset(reference_names(r)) == base | names and _reference(r))
        if tuned is not None:
            return tuned
    return _first(members, lambda r: frozenset(reference_names(r)) == names and _reference(r))


def _bandwidth_util(record: Record, copy_peak: float | None) -> float | None:
    achieved = dram_bytes_per_s(record) if passed(record) else None
    return None if achieved is None or copy_peak is None else achieved / copy_peak


def derive(doc: AnyDocument) -> dict[str, Derived]:
    """Every cell's derived figures, keyed by cell id (in matrix order)."""
    tolerance, target = numerics_tolerance(doc), noise_target(doc)
    copy_peak = copy_bytes_per_s(doc)
    derived: dict[str, Derived] = {}
    singles: dict[tuple[Any, ...], Record] = {}
    for record in doc["cells"]:
        if world_size(record) == 1:
            singles.setdefault(_single_key(record), record)
    groups = _groups(doc)
    for key, members in groups.items():
        fp32 = _reference_cell(members, groups, key, frozenset())
        tf32 = _reference_cell(members, groups, key, frozenset({"tf32"}))
        baseline = _first(members, lambda r: r.get("combination") == r.get("baseline") and _reference(r))
        for record in members:
            tflops = _tflops(record) if passed(record) else None
            peak = peak_tflops(doc, record.get("metrics", {}).get("matmul_dtype"))
            # A cell judged by its own output check has a loss that is no training loss: no difference is taken.
            diff = None if output_check(record) is not None else _loss_rel_diff(fp32, record)
            trusted, note = _trust(record, target)
            cell_id = record["id"]
            efficiency, single_id = _scaling(singles, record)
            derived[cell_id] = Derived(
                cell_id=cell_id,
                tflops=tflops,
                mfu=None if tflops is None or peak is None else tflops / peak,
                bandwidth_util=_bandwidth_util(record, copy_peak),
                speedup_vs_fp32=_ratio(fp32, record),
                speedup_vs_tf32=_ratio(tf32, record),
                speedup_vs_baseline=_ratio(baseline, record),
                memory_saving=_memory_saving(fp32, record),
                loss_rel_diff=diff,
                numerics_verdict=_verdict(record, fp32, diff, tolerance),
                trusted=trusted,
                trust_note=note,
                fp32_id=None if fp32 is None else fp32["id"],
                tf32_id=None if tf32 is None else tf32["id"],
                baseline_id=None if baseline is None else baseline["id"],
                scaling_efficiency=efficiency,
                single_id=single_id,
                **_model_mfu(doc, record),
            )
    order = [r["id"] for r in doc["cells"]]
    return {cell_id: derived[cell_id] for cell_id in order if cell_id in derived}
