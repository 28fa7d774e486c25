"""``run.tune`` of a tune results file: the JSON shape of ``ampsuite tune``'s summary, as the loader checks it.

The typed records these shapes hold are :mod:`ampsuite.contract.tunerecords`; this module is only the schema
(:class:`ampsuite.contract.wire.RunInfo` names :class:`TuneData`), so that ``results.load`` refuses a ``run.tune``
no reader could use (a string, a winner's batch size ``"abc"``, workloads ``[1, "x", null]``) with one line
naming the key, before any reader sees it.

Files of earlier versions hold the same keys, with two differences the schema admits: a step's ``decision`` was
free text and it had no ``detail`` (:meth:`ampsuite.contract.tunerecords.Step.from_json` converts it), and an
ablation row had no ``kind`` (read from its label) and, in the oldest, no ``options``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, NotRequired, TypedDict

__all__ = ["Phase", "RowKind", "TuneAblationData", "TuneData", "TuneStepData", "TuneWinnerData", "TuneWorkloadData"]


class Phase(StrEnum):
    """The phase of the search a step belongs to (docs/tune.md, "The search")."""

    REFERENCE = "reference"
    """The FP32 cell, in full: every candidate's numerics are held against it."""
    START = "start"
    """A precision starting point, screened."""
    GREEDY = "greedy"
    """A screen of a greedy path (a round's addition, the joint step, a head start, a near miss's repeats)."""
    FINAL = "final"
    """A finalist in full, or a screen settling a near miss between finalists."""
    OPTION = "option"
    """An option variant of the winner, in full."""
    BATCH = "batch"
    """Another batch size: its FP32 reference, then the winner at that size."""

    @property
    def screened(self) -> bool:
        """Whether a step of this phase is judged as a screen (a short measurement: its numerics only) in the
        step's ``untrusted``; a near miss's repeated screens count as their phase's steps."""
        return self in (Phase.START, Phase.GREEDY)


class RowKind(StrEnum):
    """What an ablation row measures."""

    FP32 = "fp32"
    TF32 = "tf32"
    WINNER = "winner"
    WITHOUT = "without"
    """The winner without one technique (and those that require it) or one option value tune chose."""


class TuneStepData(TypedDict):
    """One measurement of the search (:class:`ampsuite.contract.tunerecords.Step`)."""

    phase: Phase
    combination: str
    batch_size: int
    cell_id: str | None
    status: str
    """A status, or ``not started (budget)``."""
    throughput: float | None
    untrusted: str | None
    decision: str
    """A :class:`~ampsuite.contract.tunerecords.Decision` value; in files of earlier versions, free text."""
    detail: NotRequired[str]
    """Absent in files of earlier versions, whose ``decision`` holds the whole explanation."""


class TuneWinnerData(TypedDict):
    """A workload's winner (:class:`ampsuite.contract.tunerecords.Winner`)."""

    combination: str
    techniques: list[str]
    batch_size: int
    cell_id: str
    throughput: float
    noise: NotRequired[float | None]
    speedup_vs_fp32: NotRequired[float | None]
    options: NotRequired[dict[str, dict[str, Any]]]
    overrides: NotRequired[dict[str, dict[str, Any]]]


class TuneAblationData(TypedDict):
    """One ablation row (:class:`ampsuite.contract.tunerecords.AblationRow`)."""

    label: str
    combination: str
    techniques: list[str]
    removed: str | None
    cell_id: str | None
    status: str
    reason: str | None
    throughput: float | None
    speedup_vs_fp32: float | None
    speedup_vs_tf32: float | None
    contribution: float | None
    untrusted: str | None
    kind: NotRequired[RowKind]
    options: NotRequired[list[str]]


class TuneWorkloadData(TypedDict):
    """One workload configuration's search (:class:`ampsuite.contract.tunerecords.WorkloadTune`)."""

    key: str
    unit: str
    steps: list[TuneStepData]
    winner: TuneWinnerData | None
    ablation: list[TuneAblationData]
    reason: NotRequired[str | None]


class TuneData(TypedDict, total=False):
    """``run.tune`` (:class:`ampsuite.contract.tunerecords.TuneSummary`). Every key may be missing: a run stopped
    before its summary was written holds only the ``confirmations`` it reached."""

    budget_seconds: float
    device: str
    base_techniques: list[str]
    search: str
    screen_measure: dict[str, Any]
    finalists: int
    reserve_share: float
    incomplete: bool
    workloads: list[TuneWorkloadData]
    elapsed_seconds: float
    started_cells: int
    cells: int
    refused_cells: int
    budget_spent: bool
    confirmations: list[Any]
    """Near misses' verdicts. Checked as JSON only: a damaged verdict decides nothing (the pair is tested again,
    :meth:`ampsuite.contract.tunerecords.Verdict.from_json`), where a damaged summary leaves nothing to read."""
