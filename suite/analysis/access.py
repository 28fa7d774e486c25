"""Reading records: the figures one cell holds, and what makes two cells comparable.

Records follow :class:`ampsuite.contract.wire.Record`. The results loader
validates them, so the types are trusted here; what stays is the None-handling
the format itself allows (a cell that did not pass has empty metrics and null
numerics; ``throughput`` may be null).

Comparable configuration
    Cells that differ only in their technique combination (and, for a workload
    with a *precision option*, in that option): same workload id, same other
    workload options, same batch size, same device, same world size. A workload
    declares its precision option (``Workload.precision_option``, written to the
    record as ``workload.precision_option``) when precision is one of its
    options, as for GEMM's ``dtype``: its cells in ``float32`` are then the
    FP32/TF32 references of its cells in ``float16``/``bfloat16``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from ampsuite.contract.wire import FAILURES, ORDER, Document, Record, Status
from ampsuite.spec.screens import screened_cell

__all__ = [
    "DEFAULT_NOISE_TARGET",
    "DEFAULT_NUMERICS_TOLERANCE",
    "FAILURE_STATUSES",
    "REFERENCE_PRECISION",
    "STATUSES",
    "AnyDocument",
    "as_mapping",
    "canonical",
    "cell_label",
    "combination_label",
    "comparable_options",
    "data_parallel",
    "gpu_name",
    "group_key",
    "instability_warnings",
    "is_inference",
    "median_seconds",
    "nodes",
    "noise",
    "noise_target",
    "numerics_tolerance",
    "peak_tflops",
    "power_cap_note",
    "precision_option",
    "precision_value",
    "reference_names",
    "status_counts",
    "technique_names",
    "techniques_key",
    "throughput",
    "throughput_per_gpu",
    "workload_id",
    "waiting_note",
    "world_size",
]

AnyDocument = Document | Mapping[str, Any]
"""A results document: the loader returns plain dicts, and :class:`~ampsuite.contract.wire.Document` is their shape."""

STATUSES: tuple[Status, ...] = ORDER
"""Every status, in the order reports list them."""

FAILURE_STATUSES: frozenset[Status] = FAILURES
"""Statuses that mean the configuration itself broke (not skipped, not interrupted by the user)."""

DEFAULT_NOISE_TARGET = 0.01
"""Relative noise of the median above which a figure is not trusted, when the run does not say."""

DEFAULT_NUMERICS_TOLERANCE = 0.05
"""Relative loss difference from FP32 allowed, when the suite does not say."""

REFERENCE_PRECISION = "float32"
"""The value of a precision option that makes a cell an FP32/TF32 reference."""

LEGACY_PRECISION_OPTIONS = {"gemm": "dtype"}
"""Precision options of built-in workloads whose records predate ``workload.precision_option``
(the published example run): without it their dtypes would not be compared with each other."""

_INSTABILITY = re.compile(r"unstab|instab|throttl|noisy|noise", re.IGNORECASE)
"""Warnings that say a cell's timing cannot be trusted (the core's measure/probe warnings)."""


def finite(value: Any) -> float | None:
    """A finite float, or None (null, or a probe's own metric holding something else)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    result = float(value)
    return result if math.isfinite(result) else None


def as_mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one: records of cells that did not pass
    hold nulls where passed cells hold objects (``numerics``, ``evidence``)."""
    return value if isinstance(value, Mapping) else {}


def canonical(value: Any) -> str:
    """One spelling of JSON data, for keys: equal data, equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def passed(record: Record) -> bool:
    return record["status"] == Status.PASSED


def median_seconds(record: Record) -> float | None:
    """The median step time of a passed cell, or None."""
    step_time = record.get("metrics", {}).get("step_time")
    value = None if step_time is None else finite(step_time.get("median"))
    return value if passed(record) and value is not None and value > 0 else None


def noise(record: Record) -> float | None:
    """The relative noise of the median step time (a fraction), or None."""
    step_time = record.get("metrics", {}).get("step_time")
    return None if step_time is None else finite(step_time.get("noise"))


def throughput(record: Record) -> float | None:
    """Samples per second in the workload's unit, for a passed cell."""
    value = finite(record.get("metrics", {}).get("throughput"))
    return value if passed(record) else None


def throughput_per_gpu(record: Record) -> float | None:
    """Samples per second per process of a passed cell: ``metrics.throughput_per_gpu`` of a
    data-parallel cell (total / world size, recorded by :mod:`ampsuite.run.distributed`), the
    throughput itself of a one-process cell."""
    if world_size(record) == 1:
        return throughput(record)
    value = finite(record.get("metrics", {}).get("throughput_per_gpu"))
    return value if passed(record) else None


def technique_names(record: Record) -> tuple[str, ...]:
    return tuple(t["name"] for t in record.get("techniques", []))


def techniques_key(record: Record) -> str:
    """The techniques with their options, as one comparable string."""
    return canonical([[t["name"], t.get("options") or {}] for t in record.get("techniques", [])])


def workload_id(record: Record) -> str:
    return record["workload"]["id"]


def world_size(record: Record) -> int:
    """The processes (GPUs) the cell ran data-parallel on; 1 for records written before ``world_size`` existed."""
    value = record.get("world_size")
    return value if isinstance(value, int) and value >= 1 else 1


def nodes(record: Record) -> int:
    """The nodes a data-parallel cell spanned (suite-file ``nodes``); 1 where the record has no ``nodes``."""
    value = record.get("nodes")
    return value if isinstance(value, int) and value >= 1 else 1


def data_parallel(doc: AnyDocument) -> bool:
    """Whether the run holds a data-parallel cell (world size > 1): reports then show scaling figures."""
    return any(world_size(record) > 1 for record in doc["cells"])


def precision_option(record: Record) -> str | None:
    """The workload option that holds the cell's precision (GEMM's ``dtype``), or None."""
    workload = record["workload"]
    name = workload.get("precision_option")
    if name is None and "precision_option" not in workload:
        name = LEGACY_PRECISION_OPTIONS.get(workload.get("plugin", ""))
    return name if name is not None and name in workload.get("options", {}) else None


def precision_value(record: Record) -> str | None:
    """The cell's value of its workload's precision option (``bfloat16``), or None."""
    name = precision_option(record)
    return None if name is None else str(record["workload"]["options"][name])


def comparable_options(record: Record) -> dict[str, Any]:
    """The workload options that a cell's references must share: all but the precision option."""
    name = precision_option(record)
    return {k: v for k, v in record["workload"].get("options", {}).items() if k != name}


GroupKey = tuple[str, str, int, str, bool, int, int]


def is_inference(record: Record) -> bool:
    """Whether the cell timed inference (its record's ``notes.inference``, which the ``inference`` technique writes)."""
    return bool(as_mapping(record.get("notes")).get("inference"))


def reference_names(record: Record) -> tuple[str, ...]:
    """The technique names that place a cell in its group: without the one that made it an inference cell."""
    marker = as_mapping(as_mapping(record.get("notes")).get("inference")).get("technique")
    return tuple(name for name in technique_names(record) if name != marker)


def group_key(record: Record) -> GroupKey:
    """The comparable configuration of a cell: workload id, workload options but the precision
    option, batch size, device, training or inference (:func:`is_inference`), nodes, world size
    (world size last: a data-parallel cell's one-process counterpart differs in the last two)."""
    return (
        workload_id(record),
        canonical(comparable_options(record)),
        record.get("batch_size", 0),
        record.get("device", ""),
        is_inference(record),
        nodes(record),
        world_size(record),
    )


def numerics_tolerance(doc: AnyDocument) -> float:
    """``run.suite.numerics_tolerance``, or :data:`DEFAULT_NUMERICS_TOLERANCE`."""
    value = finite(as_mapping(as_mapping(doc.get("run")).get("suite")).get("numerics_tolerance"))
    return DEFAULT_NUMERICS_TOLERANCE if value is None or value < 0 else value


def noise_target(doc: AnyDocument) -> float:
    """``run.measure.noise_target``, or :data:`DEFAULT_NOISE_TARGET` when the run does not record it."""
    value = finite(as_mapping(as_mapping(doc.get("run")).get("measure")).get("noise_target"))
    return DEFAULT_NOISE_TARGET if value is None or value <= 0 else value


def peak_tflops(doc: AnyDocument, dtype: str | None) -> float | None:
    """The measured matmul peak of the run's device for ``dtype`` (``environment.peaks``)."""
    peaks = as_mapping(as_mapping(doc.get("environment")).get("peaks"))
    if dtype is None:
        return None
    value = finite(as_mapping(peaks.get("matmul_tflops")).get(dtype))
    return value if value is not None and value > 0 else None


def copy_bytes_per_s(doc: AnyDocument) -> float | None:
    """The run's device's measured copy bandwidth (bytes read + written per second; ``environment.peaks``)."""
    peaks = as_mapping(as_mapping(doc.get("environment")).get("peaks"))
    value = finite(peaks.get("copy_gbps"))
    return value * 1e9 if value is not None and value > 0 else None


def dram_bytes_per_s(record: Mapping[str, Any]) -> float | None:
    """Achieved DRAM throughput over the timed steps, where the clocks probe could read it (NVML GPM)."""
    return finite(as_mapping(as_mapping(record.get("metrics")).get("utilization")).get("dram_bytes_per_s"))


GPU_WAITING_SM_ACTIVE = 0.75
"""Below this share of SMs active over the timed steps (NVML GPM) a GPU step waited for a good part of its
time (on the host's launches, a data loader, a synchronisation); the compiled and eager training steps of the
default CUDA suite keep 0.79-0.97 on an H200."""


def waiting_note(record: Mapping[str, Any]) -> str | None:
    """What an untrusted GPU figure's utilization says of its cause: ``SMs active 68% of the timed steps ...``
    when NVML GPM saw the SMs idle for a good part of them, else None."""
    active = finite(as_mapping(as_mapping(record.get("metrics")).get("utilization")).get("sm_active"))
    if active is None or active >= GPU_WAITING_SM_ACTIVE:
        return None
    return f"SMs active {active:.0%} of the timed steps (NVML): the GPU waited on the host or a synchronisation"


def gpu_name(doc: AnyDocument) -> str | None:
    gpu = as_mapping(as_mapping(doc.get("environment")).get("gpu"))
    return None if gpu.get("name") is None else str(gpu["name"])


def instability_warnings(record: Mapping[str, Any]) -> list[str]:
    """The record's warnings that say its timing cannot be trusted (throttling, noise)."""
    return [str(w) for w in record.get("warnings") or [] if _INSTABILITY.search(str(w))]


def power_cap_note(record: Mapping[str, Any]) -> str | None:
    """What the clocks probe saw of a cell whose SMs slowed at the GPU's power cap, or None.

    The probe counts such a cell as trusted (the speed the GPU sustains at its power limit), but the figure is
    power-bound, which a reader comparing GPUs or power limits needs beside it. The note quotes the median SM
    clock, not only the lowest sample: a cap reached in the last steps leaves the median at full clock.
    """
    warning = next((str(w) for w in record.get("warnings") or [] if str(w).startswith("power-capped")), None)
    if warning is None:
        return None
    clocks = as_mapping(as_mapping(record.get("metrics")).get("clocks"))
    sm, power = as_mapping(clocks.get("sm_mhz")), as_mapping(clocks.get("power_w"))
    median, low = finite(sm.get("median")), finite(sm.get("min"))
    if median is None or low is None:
        return warning
    watts = finite(power.get("max"))
    averaged = " (NVML's 1-second average)" if clocks.get("power_reading") == "average" else ""
    return (
        f"SM clock lowered with NVML's software power cap (sw_power_cap) as the reason: median {median:,.0f} MHz, "
        f"lowest {low:,.0f} MHz"
        + ("" if watts is None else f", up to {watts:,.0f} W{averaged}")
        + " over the timed steps; "
        "trusted: the clocks probe counts a slowdown at the power cap as the speed the GPU sustains"
    )


def status_counts(doc: AnyDocument) -> dict[str, int]:
    """Cells per status: every known status (zeros kept, in :data:`STATUSES` order), then unknown ones."""
    counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
    for record in doc["cells"]:
        status = str(record["status"])
        counts[status] = counts.get(status, 0) + 1
    return counts


def combination_label(record: Record) -> str:
    """The combination's display name: the record's ``combination``, else its technique names, else "fp32"."""
    if record.get("combination"):
        return record["combination"]
    names = technique_names(record)
    return "+".join(names) if names else "fp32"


def cell_label(record: Record) -> str:
    """The combination's label, with the precision option's value where the workload has one, and a tune
    screen's name: ``fp32 \u00b7 dtype=bfloat16``, ``amp-fp16 \u00b7 screen-2``. Within a comparable configuration no
    two cells share it."""
    label = combination_label(record)
    name = precision_option(record)
    if name is not None:
        label = f"{label} \u00b7 {name}={precision_value(record)}"
    record_id = str(record.get("id", ""))
    screened = screened_cell(record_id)
    return label if screened is None else f"{label} \u00b7 {record_id[len(screened) + 1 :]}"
