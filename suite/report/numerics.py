"""The Numerics table of a workload page and the bars of its loss-difference chart.

Two things decide a cell's numerics verdict (``analysis.derive``), and the
page must show the one that did: a workload that checks its own output
(``numerics.output_check``: GEMM's product against float64) is judged by that
check, and its loss (one element of the product) is no training loss to hold
against FP32's; any other cell by its loss against FP32's after the same
number of applied updates, which for a loss-scaled cell whose GradScaler
skipped steps is an earlier FP32 step than the one in FP32's own row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ampsuite.analysis import as_mapping
from ampsuite.analysis.access import finite
from ampsuite.analysis.derived import output_check, skipped_updates
from ampsuite.contract.wire import Record, Status
from ampsuite.report.fmt import DASH, num
from ampsuite.report.views import CellView, Run

__all__ = ["DIFF_HEADER", "NumericsRow", "check_text", "loss_checked", "numerics_rows"]

DIFF_HEADER = (
    "|loss \u2212 FP32 loss| / |FP32 loss|, both after the same number of applied updates "
    "(a step its GradScaler skipped does not count)"
)


@dataclass(frozen=True)
class NumericsRow:
    """One passed cell's numerics: its own figures, and which comparison its verdict came from."""

    cell: CellView
    loss_diff: str
    compared: str
    """Which FP32 loss the difference was taken against, where it is not FP32's loss in its own row."""
    check: str
    """The cell's own output check (relative error against its tolerance), where the workload has one."""


def _share(value: float | None) -> str:
    """A relative error as a percentage with three significant digits: float32's 1.6e-6 is not ``0.000%``."""
    return DASH if value is None else f"{value * 100:.3g}%"


def check_text(check: Mapping[str, Any]) -> str:
    """``0.166% (tolerance 1%), bfloat16 against float64``."""
    error, bound = finite(check.get("rel_error")), finite(check.get("tolerance"))
    text = f"{_share(error) if error is not None else check.get('rel_error')} (tolerance {_share(bound)})"
    against = [str(check[k]) for k in ("precision", "reference") if check.get(k)]
    return text + (f", {' against '.join(against)}" if len(against) == 2 else "")


def loss_checked(record: Record) -> bool:
    """Whether the cell's verdict comes from its loss against FP32's (not from its own output check)."""
    return output_check(record) is None


def _compared(run: Run, record: Record) -> str:
    derived = run.derived.get(str(record.get("id")))
    skipped = skipped_updates(record)
    if derived is None or derived.fp32_id is None or derived.loss_rel_diff is None or not skipped:
        return ""
    reference = next((r for r in run.cells if r.get("id") == derived.fp32_id), None)
    ref_losses = as_mapping(as_mapping(reference).get("numerics")).get("losses") or []
    steps = len(as_mapping(record.get("numerics")).get("losses") or [])
    if not steps or len(ref_losses) < steps:
        return ""
    index = steps - 1 - skipped
    return (
        f"against FP32's loss at step {index + 1} of {steps} ({num(ref_losses[index])}): "
        f"{index} applied updates each, {skipped} of this cell's skipped by its GradScaler"
    )


def numerics_rows(run: Run, records: list[Record], views: list[CellView]) -> list[NumericsRow]:
    rows = []
    for record, view in zip(records, views, strict=True):
        if view.status != Status.PASSED:
            continue
        check = output_check(record)
        if check is None:
            rows.append(NumericsRow(view, view.loss_diff, _compared(run, record), ""))
        else:
            rows.append(NumericsRow(view, DASH, "", check_text(check)))
    return rows
