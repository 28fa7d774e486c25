"""The records of ``ampsuite tune``'s summary: the winner, the ablation rows, each workload's search, the run.

Frozen and typed, each with ``to_json``/``from_json``: the summary is ``run.tune`` of the tune results file, whose
shape :mod:`ampsuite.contract.tunewire` checks on load; the steps and verdicts it holds are
:mod:`ampsuite.contract.tunesteps`. The page, tune.md and the recipe render these records, and their words
come from the records' methods.

Here rather than in :mod:`ampsuite.tune` because readers of results files below and beside the search read it
too: ``selfcheck --tuned`` (layer 4) checks the winners, the report (layer 6, which imports no torch) renders
the page. Files of earlier versions are read as they are: keys they lack take their defaults (an ablation row
without ``kind`` takes it from its label), and their free-text decisions are converted by
:meth:`ampsuite.contract.tunesteps.Step.from_json`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ampsuite.contract.tunesteps import Step, Verdict
from ampsuite.contract.tunewire import (
    RowKind,
    TuneAblationData,
    TuneData,
    TuneWinnerData,
    TuneWorkloadData,
)
from ampsuite.contract.validate import check
from ampsuite.contract.wire import Status

__all__ = ["AblationRow", "RowKind", "TuneSummary", "Winner", "WorkloadTune"]


def _tables(options: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {technique: dict(values) for technique, values in options.items()}


@dataclass(frozen=True)
class Winner:
    """A workload configuration's recipe: the fastest trustworthy candidate, refined."""

    combination: str
    techniques: tuple[str, ...]
    batch_size: int
    cell_id: str
    throughput: float
    noise: float | None = None
    speedup_vs_fp32: float | None = None
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The option values each technique ran with that the recipe sets: the suite's ``[techniques]`` values with
    tune's choices on top (techniques run at their defaults are absent)."""
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The option values tune chose (step 5)."""

    @property
    def name(self) -> str:
        """The candidate's name in progress lines: ``COMBINATION/bsN``."""
        return f"{self.combination}/bs{self.batch_size}"

    @property
    def beats_fp32(self) -> bool:
        """False for a winner measured slower than its FP32 reference (no FP32 figure: nothing says it is)."""
        return self.speedup_vs_fp32 is None or self.speedup_vs_fp32 >= 1.0

    @property
    def recipe_options(self) -> Mapping[str, Mapping[str, Any]]:
        """What the recipe sets: every option value it ran with (summaries of early versions kept only tune's)."""
        return self.options or self.overrides

    def to_json(self) -> TuneWinnerData:
        return {
            "combination": self.combination,
            "techniques": list(self.techniques),
            "options": _tables(self.options),
            "overrides": _tables(self.overrides),
            "batch_size": self.batch_size,
            "cell_id": self.cell_id,
            "throughput": self.throughput,
            "noise": self.noise,
            "speedup_vs_fp32": self.speedup_vs_fp32,
        }

    @classmethod
    def from_json(cls, data: TuneWinnerData) -> Winner:
        return cls(
            combination=data["combination"],
            techniques=tuple(data["techniques"]),
            batch_size=data["batch_size"],
            cell_id=data["cell_id"],
            throughput=data["throughput"],
            noise=data.get("noise"),
            speedup_vs_fp32=data.get("speedup_vs_fp32"),
            options=_tables(data.get("options") or {}),
            overrides=_tables(data.get("overrides") or {}),
        )


_KIND_LABELS = {RowKind.FP32: "FP32", RowKind.TF32: "TF32", RowKind.WINNER: "winner"}


@dataclass(frozen=True)
class AblationRow:
    """One row of the ablation: FP32, TF32, the winner, or the winner without one of its steps, in full."""

    kind: RowKind
    label: str
    """:meth:`label_of` the row."""
    combination: str
    techniques: tuple[str, ...]
    options: tuple[str, ...]
    """The option values tune chose that the row runs with, ``TECHNIQUE.OPTION=VALUE``."""
    removed: str | None
    """What a :attr:`RowKind.WITHOUT` row leaves out: a technique, or an option value tune chose."""
    cell_id: str | None
    status: str
    """The record's status, :data:`NOT_STARTED` or ``interrupted``."""
    reason: str | None
    """Why the row has no figure (a skipped cell's reason, the budget), or None."""
    throughput: float | None
    speedup_vs_fp32: float | None
    speedup_vs_tf32: float | None
    contribution: float | None
    """throughput(winner) / throughput(this row) - 1, for a row that leaves something out."""
    untrusted: str | None

    @staticmethod
    def label_of(kind: RowKind, removed: str | None = None, dependents: Sequence[str] = ()) -> str:
        """A row's label: ``FP32``, ``TF32``, ``winner``, ``without X`` (and the techniques that require X)."""
        if kind is not RowKind.WITHOUT:
            return _KIND_LABELS[kind]
        also = f" (and {', '.join(dependents)}, which require{'s' if len(dependents) == 1 else ''} it)"
        return f"without {removed}{also if dependents else ''}"

    @property
    def note(self) -> str:
        """Why a row that did not pass has no figure, else why its figure is not trustworthy ("" for neither)."""
        return (self.reason if self.status != Status.PASSED else self.untrusted) or ""

    @property
    def recipe(self) -> str:
        """The row's techniques, then the option values tune chose."""
        techniques = " + ".join(self.techniques) or "none"
        return f"{techniques} ({', '.join(self.options)})" if self.options else techniques

    def to_json(self) -> TuneAblationData:
        return {
            "kind": self.kind,
            "label": self.label,
            "combination": self.combination,
            "techniques": list(self.techniques),
            "options": list(self.options),
            "removed": self.removed,
            "cell_id": self.cell_id,
            "status": self.status,
            "reason": self.reason,
            "throughput": self.throughput,
            "speedup_vs_fp32": self.speedup_vs_fp32,
            "speedup_vs_tf32": self.speedup_vs_tf32,
            "contribution": self.contribution,
            "untrusted": self.untrusted,
        }

    @classmethod
    def from_json(cls, data: TuneAblationData) -> AblationRow:
        kinds = {label: kind for kind, label in _KIND_LABELS.items()}
        return cls(
            kind=RowKind(data.get("kind") or kinds.get(data["label"], RowKind.WITHOUT)),
            label=data["label"],
            combination=data["combination"],
            techniques=tuple(data["techniques"]),
            options=tuple(data.get("options") or ()),
            removed=data["removed"],
            cell_id=data["cell_id"],
            status=data["status"],
            reason=data["reason"],
            throughput=data["throughput"],
            speedup_vs_fp32=data["speedup_vs_fp32"],
            speedup_vs_tf32=data["speedup_vs_tf32"],
            contribution=data["contribution"],
            untrusted=data["untrusted"],
        )


@dataclass(frozen=True)
class WorkloadTune:
    """One workload configuration's search: its steps, its winner (None: ``reason`` says why) and the ablation."""

    key: str
    unit: str
    steps: tuple[Step, ...] = ()
    winner: Winner | None = None
    ablation: tuple[AblationRow, ...] = ()
    reason: str | None = None

    def to_json(self) -> TuneWorkloadData:
        out: TuneWorkloadData = {
            "key": self.key,
            "unit": self.unit,
            "steps": [s.to_json() for s in self.steps],
            "winner": None if self.winner is None else self.winner.to_json(),
            "ablation": [r.to_json() for r in self.ablation],
        }
        if self.reason is not None:
            out["reason"] = self.reason
        return out

    @classmethod
    def from_json(cls, data: TuneWorkloadData) -> WorkloadTune:
        winner = data["winner"]
        return cls(
            key=data["key"],
            unit=data["unit"],
            steps=tuple(Step.from_json(s) for s in data["steps"]),
            winner=None if winner is None else Winner.from_json(winner),
            ablation=tuple(AblationRow.from_json(r) for r in data["ablation"]),
            reason=data.get("reason"),
        )


@dataclass(frozen=True)
class TuneSummary:
    """A tune run: the budget spent, each workload configuration's search, the near misses' verdicts."""

    device: str | None = None
    budget_seconds: float = 0.0
    elapsed_seconds: float = 0.0
    base_techniques: tuple[str, ...] = ()
    search: str = ""
    """The search in one sentence (the page's header)."""
    screen_measure: Mapping[str, Any] = field(default_factory=dict)
    finalists: int | None = None
    reserve_share: float | None = None
    incomplete: bool = False
    """Interrupted: the search so far."""
    workloads: tuple[WorkloadTune, ...] = ()
    started_cells: int = 0
    cells: int = 0
    refused_cells: int = 0
    budget_spent: bool = False
    confirmations: tuple[Verdict, ...] = ()

    def to_json(self) -> TuneData:
        out: TuneData = {
            "budget_seconds": self.budget_seconds,
            "base_techniques": list(self.base_techniques),
            "search": self.search,
            "screen_measure": dict(self.screen_measure),
            "incomplete": self.incomplete,
            "workloads": [w.to_json() for w in self.workloads],
            "elapsed_seconds": self.elapsed_seconds,
            "started_cells": self.started_cells,
            "cells": self.cells,
            "refused_cells": self.refused_cells,
            "budget_spent": self.budget_spent,
            "confirmations": [v.to_json() for v in self.confirmations],
        }
        if self.device is not None:
            out["device"] = self.device
        if self.finalists is not None:
            out["finalists"] = self.finalists
        if self.reserve_share is not None:
            out["reserve_share"] = self.reserve_share
        return out

    @classmethod
    def from_json(cls, data: Any, where: str = "run.tune") -> TuneSummary:
        """The summary ``run.tune`` holds, of this version or an earlier one.

        :raises ampsuite.contract.validate.WireError: (naming the key under ``where``) when ``data`` does not
            have the shape of :class:`~ampsuite.contract.tunewire.TuneData`; the results loader has refused such
            a file already.
        """
        check(data, TuneData, where)
        verdicts = (Verdict.from_json(v) for v in data.get("confirmations") or [])
        return cls(
            device=data.get("device"),
            budget_seconds=data.get("budget_seconds", 0.0),
            elapsed_seconds=data.get("elapsed_seconds", 0.0),
            base_techniques=tuple(data.get("base_techniques") or ()),
            search=data.get("search", ""),
            screen_measure=dict(data.get("screen_measure") or {}),
            finalists=data.get("finalists"),
            reserve_share=data.get("reserve_share"),
            incomplete=data.get("incomplete", False),
            workloads=tuple(WorkloadTune.from_json(w) for w in data.get("workloads") or []),
            started_cells=data.get("started_cells", 0),
            cells=data.get("cells", 0),
            refused_cells=data.get("refused_cells", 0),
            budget_spent=data.get("budget_spent", False),
            confirmations=tuple(v for v in verdicts if v is not None),
        )

    @classmethod
    def of(cls, summary: TuneSummary | Mapping[str, Any]) -> TuneSummary:
        """``summary`` as a record: itself, or the record its JSON (``run.tune``) holds."""
        return summary if isinstance(summary, TuneSummary) else cls.from_json(summary)
