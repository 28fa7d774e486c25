"""The records of ``ampsuite tune``'s summary: the winner, the ablation rows, each workload's search, the run.

Frozen and typed, each with ``to_json``/``from_json``: the summary is ``run.tune`` of the tune results file, whose
shape is these records' fields (:func:`ampsuite.contract.validate.check` checks a file's on load, through
:class:`ampsuite.contract.wire.RunInfo`); the steps and verdicts it holds are
:mod:`ampsuite.contract.tunesteps`. The page, tune.md and the recipe render these records, and their words
come from the records' methods.

Here rather than in :mod:`ampsuite.tune` because readers of results files below and beside the search read it
too: ``selfcheck --tuned`` (layer 4) checks the winners, the report (layer 6, which imports no torch) renders
the page. Files of earlier versions are read as they are: keys they lack take their defaults (an ablation row
without ``kind`` takes it from its label), and their free-text decisions are converted by
:meth:`ampsuite.contract.tunesteps.Step.from_json`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ampsuite.contract import codec
from ampsuite.contract.status import Status
from ampsuite.contract.tunesteps import Step, Verdict
from ampsuite.contract.validate import OPTIONAL, WIRE, check

__all__ = ["AblationRow", "RowKind", "TuneSummary", "Winner", "WorkloadTune"]


class RowKind(StrEnum):
    """What an ablation row measures."""

    FP32 = "fp32"
    TF32 = "tf32"
    WINNER = "winner"
    WITHOUT = "without"
    """The winner without one technique (and those that require it) or one option value tune chose."""


@dataclass(frozen=True)
class Winner(codec.JsonRecord):
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


_KIND_LABELS = {RowKind.FP32: "FP32", RowKind.TF32: "TF32", RowKind.WINNER: "winner"}


@dataclass(frozen=True)
class AblationRow(codec.JsonRecord):
    """One row of the ablation: FP32, TF32, the winner, or the winner without one of its steps, in full."""

    kind: RowKind = field(metadata={OPTIONAL: True})
    label: str
    """:meth:`label_of` the row."""
    combination: str
    techniques: tuple[str, ...]
    options: tuple[str, ...] = field(metadata={OPTIONAL: True})
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

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AblationRow:
        """A row of this version, or of an earlier one, which wrote no ``kind`` (it is read from the label) and,
        in the oldest, no ``options``."""
        kinds = {label: kind for kind, label in _KIND_LABELS.items()}
        return codec.from_json(cls, {"kind": kinds.get(data["label"], RowKind.WITHOUT), "options": (), **data})


@dataclass(frozen=True)
class WorkloadTune(codec.JsonRecord):
    """One workload configuration's search: its steps, its winner (None: ``reason`` says why) and the ablation."""

    key: str
    unit: str
    steps: tuple[Step, ...] = ()
    winner: Winner | None = None
    ablation: tuple[AblationRow, ...] = ()
    reason: str | None = None


@dataclass(frozen=True)
class TuneSummary(codec.JsonRecord):
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
    runs: int = 0
    """The tune runs that wrote this file: 1, and one more for each ``tune --resume``; 0 in a file written before
    they were counted (``run.resumed`` then stands in, which counts an ``ampsuite run --resume`` too)."""
    confirmations: tuple[Verdict, ...] = field(default=(), metadata={WIRE: list[Any]})
    """A damaged verdict decides nothing (the pair is tested again), so a file holding one is not refused."""

    @classmethod
    def from_json(cls, data: Any, where: str = "run.tune") -> TuneSummary:
        """The summary ``run.tune`` holds, of this version or an earlier one.

        :raises ampsuite.contract.validate.WireError: (naming the key under ``where``) when ``data`` does not
            have the shape of this record; the results loader has refused such a file already.
        """
        check(data, TuneSummary, where)
        verdicts = (Verdict.from_json(v) for v in data.get("confirmations") or [])
        summary = codec.from_json(cls, {k: v for k, v in data.items() if k != "confirmations"})
        return dataclasses.replace(summary, confirmations=tuple(v for v in verdicts if v is not None))

    def runs_of(self, doc: Mapping[str, Any] | None) -> int:
        """The tune runs that wrote ``doc``, the results file whose ``run.tune`` this summary is."""
        if self.runs:
            return self.runs
        run = (doc or {}).get("run")
        resumed = run.get("resumed") if isinstance(run, Mapping) else None
        return 1 + len(resumed) if isinstance(resumed, list) else 1

    def counts(self, records: Sequence[Mapping[str, Any]] | None = None) -> str:
        """The candidates in words that add up (tune.md's and the page's): the results file's cells, measured in
        this run or kept from an earlier one, of which those skipped (with ``records``, the file's) were pruned,
        never run; then the candidates the budget did not start, which have no cell."""
        measured = min(self.started_cells, self.cells)
        rest = self.cells - measured
        parts = [f"{measured:,} measured in this run"]
        skipped = None if records is None else sum(1 for r in records if r.get("status") == Status.SKIPPED)
        if skipped is None:
            parts += [f"{rest:,} kept from an earlier run or pruned"] if rest else []
        else:
            pruned = min(skipped, rest)
            parts += [f"{rest - pruned:,} kept from an earlier run"] if rest - pruned else []
            parts += [f"{pruned:,} pruned (skipped, never run)"] if pruned else []
        text = f"{self.cells:,} candidate cell{'' if self.cells == 1 else 's'} in the results file: {', '.join(parts)}"
        return text + (
            f"; besides them, {self.refused_cells:,} not started (budget spent)" if self.refused_cells else ""
        )

    @classmethod
    def with_document(
        cls, value: TuneSummary | Mapping[str, Any], doc: Mapping[str, Any] | None = None
    ) -> tuple[TuneSummary, Mapping[str, Any] | None]:
        """The summary that ``value`` is or holds (a record, its JSON, or a whole results document whose
        ``run.tune`` it is), and the results document: ``doc``, else ``value`` when it is one."""
        if isinstance(value, Mapping):
            run = value.get("run")
            if isinstance(run, Mapping) and "tune" in run:
                return cls.of(run["tune"]), value if doc is None else doc
        return cls.of(value), doc

    @classmethod
    def of(cls, summary: TuneSummary | Mapping[str, Any]) -> TuneSummary:
        """``summary`` as a record: itself, or the record its JSON (``run.tune``) holds."""
        return summary if isinstance(summary, TuneSummary) else cls.from_json(summary)
