"""The charts of a workload page: throughput, speedups, memory, TFLOP/s and loss difference.

Built from the raw figures (not the formatted ones) as inline SVG with
:mod:`ampsuite.report.charts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from ampsuite import analysis
from ampsuite.contract.wire import Record
from ampsuite.report import charts
from ampsuite.report.fmt import pct
from ampsuite.report.numerics import DIFF_HEADER, loss_checked
from ampsuite.report.views import Run, setup_label

__all__ = ["Chart", "workload_charts"]


@dataclass(frozen=True)
class Chart:
    title: str
    caption: str
    svg: Markup


def _label(record: Record) -> str:
    return f"{setup_label(record)} \u00b7 bs {record.get('batch_size')}"


def _batch_key(value: Any) -> tuple[int, float, str]:
    return (0, float(value), "") if isinstance(value, int | float) else (1, 0.0, str(value))


def _reference_text(records: list[Record], derived: list[tuple[Record, Any]], attr: str, name: str) -> str:
    """The reference of a speedup chart with its techniques: ``FP32 (fp32: cudnn-benchmark)``."""
    ref_id = next((getattr(d, attr) for _, d in derived if getattr(d, attr)), None)
    ref = next((r for r in records if r.get("id") == ref_id), None)
    if ref is None:
        return f"{name}: the baseline with only the suite's base techniques"
    techniques = [str(t.get("name")) for t in ref.get("techniques") or []]
    return f"{name} ({ref.get('combination')}: {', '.join(techniques) or 'no technique'})"


def workload_charts(run: Run, records: list[Record], unit: str) -> list[Chart]:
    timed = [r for r in records if analysis.throughput(r) is not None]
    derived = [(r, run.derived[str(r.get("id"))]) for r in timed]
    batches = sorted({r.get("batch_size") for r in records}, key=_batch_key)
    categories = [str(b) for b in batches]
    combos: dict[str, list[tuple[str, float]]] = {}
    for record in timed:
        value = analysis.throughput(record)
        assert value is not None
        combos.setdefault(setup_label(record), []).append((str(record.get("batch_size")), value))
    out = [
        Chart(
            "Throughput against batch size",
            f"{unit}/s per technique combination; each point is the median over the timed steps."
            + (" A data-parallel cell's point is its total over every GPU." if run.data_parallel else ""),
            charts.line_chart(
                categories,
                [charts.Series(name, pts) for name, pts in combos.items()],
                title="Throughput against batch size",
                x_label="batch size",
                y_label=f"{unit}/s",
                unit=f"{unit}/s",
            ),
        )
    ]
    for attr, title, ref in (
        ("speedup_vs_fp32", "Speedup against FP32", _reference_text(records, derived, "fp32_id", "FP32")),
        ("speedup_vs_tf32", "Speedup against TF32", _reference_text(records, derived, "tf32_id", "TF32")),
    ):
        bars = [
            charts.Bar(_label(r), v, tone="good" if v > 1 else "normal")
            for r, d in derived
            if (v := getattr(d, attr)) is not None
        ]
        if bars:
            out.append(
                Chart(
                    title,
                    f"Median step time of {ref} over the cell's, same batch size; the dashed line is 1\u00d7.",
                    charts.bar_chart(
                        bars,
                        title=title,
                        unit="\u00d7",
                        fmt=lambda v: f"{v:.2f}",
                        reference=1.0,
                        reference_label=ref,
                    ),
                )
            )
    memory = []
    for r, d in derived:
        metrics = r["metrics"]
        peak_bytes = metrics.get("peak_memory_bytes")
        if peak_bytes is not None:
            tone = "good" if (d.memory_saving or 0) > 0 else "normal"
            tip = f"{_label(r)} ({peak_bytes} bytes, {metrics.get('memory_kind', '?')})"
            memory.append(charts.Bar(_label(r), peak_bytes / (1 << 30), tooltip=tip, tone=tone))
    if memory:
        out.append(
            Chart(
                "Peak memory",
                "Peak memory during the timed steps (its kind: CUDA reserved, allocated, or host RSS; see the table).",
                charts.bar_chart(memory, title="Peak memory", unit="GiB", fmt=lambda v: f"{v:.2f}"),
            )
        )
    flops = []
    for r, d in derived:
        if d.tflops is None:
            continue
        dtype = r["metrics"].get("matmul_dtype")
        peak = analysis.peak_tflops(run.doc, dtype)
        flops.append(
            charts.Bar(
                _label(r),
                d.tflops,
                tooltip=f"{_label(r)}, MFU {pct(d.mfu)}",
                marker=peak,
                marker_label=f"measured {dtype} matmul peak",
            )
        )
    if flops:
        out.append(
            Chart(
                "Achieved TFLOP/s against the measured peak",
                "Bars: training FLOPs per step over the median step time. Black ticks: the matmul peak measured "
                "on this device for the cell's matmul dtype (MFU = bar / tick).",
                charts.bar_chart(flops, title="Achieved TFLOP/s", unit="TFLOP/s"),
            )
        )
    tolerance = analysis.numerics_tolerance(run.doc)
    # A cell judged by its own output check is left out: its loss is one element of a product, and a
    # bar past the tolerance line would contradict the verdict the check gave.
    losses = [
        charts.Bar(_label(r), d.loss_rel_diff, tone="bad" if d.numerics_verdict == "drift" else "good")
        for r, d in derived
        if d.loss_rel_diff is not None and d.loss_rel_diff != float("inf") and loss_checked(r)
    ]
    checked = sum(1 for r, _ in derived if not loss_checked(r))
    if losses:
        out.append(
            Chart(
                "Loss difference from FP32",
                f"{DIFF_HEADER}; the dashed line is the tolerance."
                + (
                    f" {checked} cell{'s' if checked > 1 else ''} judged by {'their' if checked > 1 else 'its'} "
                    "own output check (see the Numerics table) left out."
                    if checked
                    else ""
                ),
                charts.bar_chart(
                    losses,
                    title="Relative loss difference from FP32",
                    fmt=lambda v: f"{v * 100:.2f}%",
                    tick_fmt=lambda v: f"{v * 100:g}%",
                    reference=tolerance,
                    reference_label="numerics tolerance",
                ),
            )
        )
    return out
