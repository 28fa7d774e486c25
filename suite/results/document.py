"""A run's results document: its header, a cell's empty record, and the file opened for the run (new, or resumed).

An existing results file is never overwritten: a new run renames it aside, and a resumed run that must replace
records copies it aside first.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from ampsuite.contract.cell import Cell
from ampsuite.contract.errors import ResultsFileError
from ampsuite.contract.status import FAILURES
from ampsuite.host import environment
from ampsuite.host.manager import Registry
from ampsuite.results import definition
from ampsuite.results.outputs import copy_aside, refuse_inputs, set_aside
from ampsuite.results.store import FORMAT, TERMINAL, VERSION, ResultsWriter, check_comparable, load
from ampsuite.spec.quality import QualitySpec
from ampsuite.spec.suitespec import MeasureSpec, SuiteSpec

__all__ = ["DocumentSettings", "base_record", "check_same_suite", "new_document", "now", "open_results"]


class DocumentSettings(Protocol):
    """What opening a results file needs of a run's settings (``ampsuite.run.runner.RunConfig`` has it)."""

    @property
    def output(self) -> Path: ...
    @property
    def resume(self) -> bool: ...
    @property
    def retry_failed(self) -> bool: ...
    @property
    def argv(self) -> Sequence[str]: ...


def now() -> str:
    """The current UTC time as records and run headers write it (ISO 8601, to the second)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def base_record(cell: Cell, registry: Registry) -> dict[str, Any]:
    """A record of ``cell`` with every field present and nothing measured yet (status None)."""
    return {
        "id": cell.id,
        "status": None,
        "device": cell.device,
        "batch_size": cell.batch_size,
        "world_size": cell.world_size,
        **({"nodes": cell.nodes} if cell.nodes > 1 else {}),
        "combination": cell.combination,
        "baseline": cell.baseline,
        "workload": {
            "id": cell.workload_id,
            "plugin": cell.workload,
            "options": cell.options,
            "axes": cell.axes,
            "unit": registry.workloads[cell.workload].unit,
            "precision_option": registry.workloads[cell.workload].precision_option,
        },
        "techniques": [{"name": n, "options": o} for n, o in cell.techniques],
        "started": now(),
        "wall_seconds": 0.0,
        "metrics": {},
        "numerics": None,
        "diagnostics": {},
        "notes": {},
        "warnings": [],
        "evidence": None,
        "machine": dict(environment.identity(cell.device)),
    }


def new_document(spec: SuiteSpec, config: DocumentSettings, device: str, registry: Registry) -> dict[str, Any]:
    doc = _new_document(spec, config, device, registry)
    if spec.quality is not None:
        doc["run"]["suite"]["quality"] = spec.quality.as_dict()
    return doc


def _new_document(spec: SuiteSpec, config: DocumentSettings, device: str, registry: Registry) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "run": {
            "id": dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ"),
            "started": now(),
            "finished": None,
            "argv": list(config.argv),
            "suite": {
                "name": spec.name,
                "path": spec.path,
                "sha256": spec.sha256,
                "baseline": spec.baseline,
                "device": device,
                "numerics_tolerance": spec.numerics_tolerance,
            },
            "measure": asdict(spec.measure),
            "plugins": [asdict(p) for p in registry.plugins],
        },
        "environment": environment.collect(device),
        "cells": [],
    }


def open_results(
    spec: SuiteSpec,
    config: DocumentSettings,
    device: str,
    registry: Registry,
    ids: set[str],
    cells: Sequence[Cell] = (),
    message: Callable[[str], None] | None = None,
) -> ResultsWriter:
    """The writer of this run's results file: resumed from ``config.output`` when asked, else a new
    document (an existing file is renamed aside, :func:`ampsuite.results.outputs.set_aside`, never overwritten).

    Resuming keeps the finished records of ``ids``; of those among ``cells``, only the ones that measured
    the same definition (:func:`ampsuite.results.definition.difference`) and, with ``config.retry_failed``, did
    not end failed, oom, timeout or crashed: the others run again, and the file as it was is copied aside first,
    so nothing measured is lost. Records of cells outside ``ids`` (a run narrowed by ``-k``) are kept as they are.
    """
    out = config.output
    refuse_inputs([out], [spec.path], "the results file")
    doc = new_document(spec, config, device, registry)
    if config.resume and out.exists():
        old = load(out)
        check_comparable(str(out), old["environment"], doc["environment"])
        check_same_suite(str(out), old, spec)
        by_id = {c.id: c for c in cells}
        changed = {}
        for r in old["cells"]:
            cell = by_id.get(r["id"])
            if cell is None or r["status"] not in TERMINAL:
                continue
            if config.retry_failed and r["status"] in FAILURES:
                changed[r["id"]] = f"its record ended {r['status']} (--retry-failed)"
            elif (why := definition.difference(r, cell, registry)) is not None:
                changed[r["id"]] = f"its record measured other {why}"
        if changed:
            backup = copy_aside(out)
            for cell_id, why in changed.items():
                if message is not None:
                    message(f"{cell_id} runs again: {why} (the file as it was: {backup})")
        # A record of a cell this run does not select (-k, a narrower suite) stays as it is: a resumed
        # run adds to the file, it never drops what an earlier run measured.
        old["cells"] = [
            r for r in old["cells"] if r["id"] not in changed and (r["status"] in TERMINAL or r["id"] not in ids)
        ]
        old["run"]["finished"] = None
        old["run"].setdefault("resumed", []).append(now())
        return ResultsWriter(out, old)
    if out.exists():
        # Never overwrite measurements: the previous file is kept beside the new one.
        backup = set_aside(out)
        if message is not None:
            message(f"{out}: the earlier file there is kept as {backup}")
    return ResultsWriter(out, doc)


def check_same_suite(path: str, old: dict[str, Any], spec: SuiteSpec) -> None:
    """Refuse to resume ``old`` (the document at ``path``) with another suite: its records, noise target and
    measurement settings are that suite's, and a resumed run would mix two suites in one file."""
    name = (old["run"].get("suite") or {}).get("name")
    if name != spec.name:
        raise ResultsFileError(
            path,
            f"holds a run of suite {str(name)[:80]!r}, not of {spec.name!r}; --resume continues a run of the same "
            "suite (choose another -o, or leave out --resume to start anew: this file is then kept aside)",
        )
    # Records timed to another stopping rule (or trained to another quality budget) would sit beside new ones
    # and be judged by the new settings.
    changed = _differences("", old["run"].get("measure") or {}, asdict(spec.measure), asdict(MeasureSpec()))
    quality = (old["run"].get("suite") or {}).get("quality")
    if (quality is None) != (spec.quality is None):
        changed.append("[quality] " + ("added" if quality is None else "removed"))
    elif quality is not None and spec.quality is not None:
        now = json.loads(json.dumps(spec.quality.as_dict()))
        changed += _differences("quality.", quality, now, json.loads(json.dumps(QualitySpec().as_dict())))
    if changed:
        raise ResultsFileError(
            path,
            f"was measured with other settings ({', '.join(changed)}); --resume continues a run measured alike "
            "(restore them, or leave out --resume to start anew: this file is then kept aside)",
        )


def _differences(
    prefix: str, before: Mapping[str, Any], now: Mapping[str, Any], defaults: Mapping[str, Any]
) -> list[str]:
    """``KEY old -> new`` for each setting that changed; a key the file's version did not have yet was measured
    as its default."""
    was = {k: before.get(k, defaults.get(k)) for k in now}
    return [f"{prefix}{k} {was[k]!r} -> {now[k]!r}" for k in now if was[k] != now[k]]
