"""The JSON shape of quality runs (``[quality]``, docs/quality.md): what a record and a run hold of them.

A record's ``quality`` lists one :class:`QualityRun` per seed (each trained in its own process);
``run.suite.quality`` is the suite's ``[quality]`` table (:class:`QualityRule`); ``run.quality``
holds the verdicts reached when the run ended (:class:`QualityVerdicts`), which
``ampsuite.analysis.quality`` derives again from the records whenever a reader asks.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

__all__ = ["Quality", "QualityCurve", "QualityRule", "QualityRun", "QualityVerdict", "QualityVerdicts"]


class QualityCurve(TypedDict):
    """The evaluations of one seed's training, one entry per evaluation."""

    steps: list[int]
    """The optimizer steps after which the held-out split was evaluated."""
    eval_loss: list[float | None]
    train_loss: list[float | None]
    """The mean training loss of the steps since the previous evaluation."""
    seconds: list[float]
    """Training wall time up to each evaluation (from the first step, its compilation included; evaluations not)."""
    eval_accuracy: NotRequired[list[float | None]]


class QualityRun(TypedDict):
    """One seed's training to the budget."""

    seed: int
    steps: int
    """The budget in optimizer steps (the numerics phase's included)."""
    samples_per_step: int | float
    curve: QualityCurve
    final_eval_loss: float | None
    """None when the loss went non-finite (then ``diverged_step`` says when)."""
    final_eval_accuracy: float | None
    diverged_step: int | None
    target: float | None
    time_to_target: float | None
    """Training seconds until the eval loss first reached ``target``; None when it never did."""
    steps_to_target: int | None
    train_seconds: float
    eval_seconds: float


class Quality(TypedDict):
    runs: list[QualityRun]


class QualityRule(TypedDict):
    """``run.suite.quality``: the suite's ``[quality]`` table (``ampsuite.spec.quality.QualitySpec``)."""

    steps: int
    samples: int
    eval_every: int
    eval_batches: int
    seeds: int
    reference: str
    references: dict[str, str]
    tolerance: float
    p_value: float
    targets: dict[str, float]
    require_same_quality: bool


class QualityVerdict(TypedDict):
    """One cell held against its reference (``ampsuite.analysis.quality.QualityVerdict`` as JSON)."""

    cell: str
    verdict: str
    reference: str | None
    reason: str
    seeds: int
    mean: float | None
    std: float | None
    reference_mean: float | None
    reference_std: float | None
    rel_diff: float | None
    t: float | None
    df: float | None
    p: float | None
    time_to_target: float | None
    reached: int


class QualityVerdicts(TypedDict):
    """``run.quality``: the rule in words and every judged cell's verdict."""

    rule: str
    verdicts: list[QualityVerdict]
