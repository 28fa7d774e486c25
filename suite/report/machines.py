"""The machines page: the same cells on several machines, side by side.

Which document belongs to which machine, and every figure, come from
:func:`ampsuite.analysis.across_machines`; this module formats them, charts the
throughput of each cell per machine (one chart per workload: units differ
between workloads) and gives the rows the CSV export writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

from ampsuite import analysis
from ampsuite.analysis import Across, AnyDocument, CellAcross, Machine, MachineCell
from ampsuite.contract.wire import Status
from ampsuite.report import charts
from ampsuite.report.fmt import DASH, bytes_, num, pct, ratio
from ampsuite.report.provenance import cudnn_version
from ampsuite.report.views import cell_anchor, evidence_view, run_label, workload_page_name

__all__ = ["MACHINES_NOTE", "machines_context", "reason"]

MACHINES_NOTE = (
    "A machine is what a results file's environment names: the GPU card (its UUID), else the CPU and the host; "
    "two cards of one model are two machines. Files of different machines are compared here, one file per "
    "machine; files of one machine are its history. "
    "\u00d7baseline is each cell against the suite's baseline cell of its own run on its own machine; "
    "\u00d7first is this machine's throughput over the first machine's for the same cell."
)


def file_names(count: int, files: Sequence[str | PurePath]) -> list[str]:
    """The name of each document: its file's name, or ``document N`` when it was given without a file."""
    return [PurePath(files[i]).name if i < len(files) else f"document {i + 1}" for i in range(count)]


def reason(entry: MachineCell) -> str:
    """Why a cell that did not pass has no figure (its evidence's one-line summary)."""
    if entry.status == Status.PASSED:
        return ""
    view = evidence_view(entry.record)
    return "" if view is None else view.summary


def _machine_rows(
    machines: Sequence[Machine], docs: Sequence[AnyDocument], names: Sequence[str], json_names: Sequence[str]
) -> list[dict[str, Any]]:
    rows = []
    for m in machines:
        doc = docs[m.compared]
        env = analysis.as_mapping(doc.get("environment"))
        suite = analysis.as_mapping(analysis.as_mapping(doc.get("run")).get("suite"))
        rows.append(
            {
                "label": m.label,
                "device": m.device,
                "host": m.host or DASH,
                "run": run_label(doc),
                "file": names[m.compared],
                "json": json_names[m.compared] if m.compared < len(json_names) else "",
                "torch": str(env.get("torch") or DASH),
                "driver": str(env.get("driver") or DASH),
                "cuda": str(env.get("torch_cuda") or DASH),
                "cuda_driver": str(env.get("cuda_driver") or DASH),
                "cudnn": cudnn_version(env.get("cudnn")) if env.get("gpu") else DASH,
                "earlier": [names[i] for i in m.docs[:-1]],
                "suite": str(suite.get("sha256") or "")[:8],
                "code": _short_commit(env.get("ampsuite_commit")),
            }
        )
    return rows


def _short_commit(commit: object) -> str:
    """``2f968aaf+dirty`` of a full commit id, as git abbreviates it."""
    text = str(commit or "")
    head, dirty = text.removesuffix("+dirty"), text.endswith("+dirty")
    return head[:8] + ("+dirty" if dirty else "") if head else ""


def _row(machine: Machine, entry: MachineCell | None, cell: CellAcross) -> dict[str, Any]:
    if entry is None:
        return {"machine": machine.label, "status": "", "reason": "not in this machine's run", "href": ""}
    d = entry.derived
    return {
        "machine": machine.label,
        "status": entry.status,
        "reason": reason(entry),
        "href": f"{workload_page_name(cell.workload)}#{cell_anchor(machine.compared, cell.id)}",
        "throughput": num(entry.throughput),
        "speedup": ratio(d.speedup_vs_baseline),
        "speedup_title": f"median step time of {d.baseline_id} over this cell's"
        if d.baseline_id
        else "no passed baseline cell in this run",
        "memory": bytes_(entry.peak_memory_bytes),
        "mfu": pct(d.mfu),
        "ratio": ratio(entry.ratio_to_first),
        "trusted": d.trusted,
        "trust_note": d.trust_note or "",
        "power_cap": analysis.power_cap_note(entry.record) or "",
    }


def _chart(workload: str, unit: str, cells: Sequence[CellAcross], machines: Sequence[Machine]) -> Any:
    series = []
    for k, m in enumerate(machines):
        entries = [(c.id, e, v) for c in cells if (e := c.entries[k]) is not None and (v := e.throughput) is not None]
        untrusted = {i: e.derived.trust_note or "untrusted" for i, e, _ in entries if not e.derived.trusted}
        series.append(charts.Series(m.label, [(i, v) for i, _, v in entries], untrusted))
    return charts.grouped_bar_chart(
        [c.id for c in cells], series, title=f"Throughput of {workload} per machine", unit=f"{unit}/s"
    )


def machines_context(
    docs: Sequence[AnyDocument],
    files: Sequence[str | PurePath] = (),
    json_names: Sequence[str] = (),
    across: Across | None = None,
) -> dict[str, Any]:
    """The machines page: the machines, then per workload a chart and a table (a row per cell and machine)."""
    across = across or analysis.across_machines(docs, files)
    names = file_names(len(docs), files)
    by_workload: dict[str, list[CellAcross]] = {}
    for cell in across.cells:
        by_workload.setdefault(cell.workload, []).append(cell)
    workloads = []
    for workload, cells in by_workload.items():
        units = sorted({c.unit for c in cells})
        rows = []
        for cell in cells:
            for k, machine in enumerate(across.machines):
                row = _row(machine, cell.entries[k], cell)
                row.update(cell=cell.id, span=len(across.machines) if k == 0 else 0, unit=cell.unit)
                rows.append(row)
        workloads.append(
            {
                "workload": workload,
                "page": workload_page_name(workload),
                "unit": ", ".join(units),
                "chart": _chart(workload, ", ".join(units), cells, across.machines),
                "rows": rows,
            }
        )
    only_one: dict[int, list[str]] = {}
    for cell_id, index in across.only_one:
        only_one.setdefault(index, []).append(cell_id)
    machine_rows = _machine_rows(across.machines, docs, names, json_names)
    return {
        "machines": machine_rows,
        "suites_differ": len({r["suite"] for r in machine_rows}) > 1,
        "first": across.machines[0].label,
        "count": len(across.cells),
        "workloads": workloads,
        "only_one": [{"machine": across.machines[i].label, "cells": ids} for i, ids in sorted(only_one.items())],
        "mixed": any(len(m.docs) > 1 for m in across.machines),
        "note": MACHINES_NOTE,
    }
