"""Quality verdicts: does a recipe train as well as its reference? (docs/quality.md)

A quality suite's cells hold one training per seed (``record["quality"]["runs"]``).
Each cell is held against the cell of its reference combination
(``[quality] reference``, or its entry in ``references``) in the same
comparable configuration (:func:`ampsuite.analysis.group_key`), by the final
eval loss of its seeds:

* ``"diverged"``: a seed's loss went non-finite;
* ``"same quality"``: the mean final eval loss is below the reference's, or
  above it by at most ``tolerance`` (relative), or further above it but not
  significantly so: a one-sided Welch t-test (H1: the cell's mean loss is
  higher) gives p >= ``p_value``;
* ``"worse"``: otherwise. With one seed on either side there is no spread to
  test, and the tolerance alone decides;
* ``"reference"``: the reference cell itself; ``"n/a"``: no reference cell with
  quality runs, or the reference diverged.

The t distribution comes from scipy (``scipy.stats.ttest_ind``), imported when
a verdict needs a test, so reading results without quality runs needs no scipy.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ampsuite.analysis.access import AnyDocument, as_mapping, finite, group_key
from ampsuite.contract.errors import UsageError
from ampsuite.contract.qualitywire import QualityVerdict as VerdictData
from ampsuite.contract.qualitywire import QualityVerdicts
from ampsuite.contract.wire import Record

__all__ = [
    "QualityRule",
    "QualityVerdict",
    "Seeds",
    "quality_lines",
    "quality_reason",
    "quality_rule",
    "quality_summary",
    "quality_verdicts",
    "seeds_of",
    "statistic_text",
    "target_text",
    "welch_greater",
]

Verdict = Literal["reference", "same quality", "worse", "diverged", "n/a"]
ACCEPTED: frozenset[str] = frozenset({"reference", "same quality"})
"""Verdicts under which a cell may be crowned when the suite requires the same quality."""


@dataclass(frozen=True)
class QualityRule:
    """A run's ``[quality]`` table, as its results document records it (``run.suite.quality``)."""

    tolerance: float = 0.0025
    p_value: float = 0.05
    reference: str = "fp32"
    references: Mapping[str, str] = field(default_factory=dict)
    targets: Mapping[str, float] = field(default_factory=dict)
    require_same_quality: bool = True

    def reference_of(self, combination: str) -> str:
        return self.references.get(combination, self.reference)

    def describe(self) -> str:
        """The rule in one sentence, with its numbers."""
        return (
            "same quality: the mean final eval loss over the seeds lower than the reference's or at most "
            f"{self.tolerance:.2%} above it, or not higher by a one-sided Welch t-test at p = {self.p_value:g}; worse "
            "otherwise; diverged: a seed's loss went non-finite"
        )


def quality_rule(doc: AnyDocument) -> QualityRule | None:
    """The rule of ``doc``'s quality suite, or None for a run without ``[quality]``."""
    table = as_mapping(as_mapping(as_mapping(doc.get("run")).get("suite")).get("quality"))
    if not table:
        return None
    known = QualityRule.__dataclass_fields__
    return QualityRule(**{k: v for k, v in table.items() if k in known})


@dataclass(frozen=True)
class Seeds:
    """One cell's trainings, one per seed, summarised."""

    losses: tuple[float | None, ...]
    accuracies: tuple[float | None, ...]
    times_to_target: tuple[float | None, ...]
    diverged_steps: tuple[int | None, ...]

    @property
    def diverged(self) -> bool:
        return any(s is not None for s in self.diverged_steps) or any(v is None for v in self.losses)

    @property
    def finite_losses(self) -> list[float]:
        return [v for v in self.losses if v is not None]

    @property
    def mean(self) -> float | None:
        values = self.finite_losses
        return statistics.fmean(values) if values else None

    @property
    def std(self) -> float | None:
        values = self.finite_losses
        return statistics.stdev(values) if len(values) > 1 else None

    @property
    def accuracy(self) -> float | None:
        values = [v for v in self.accuracies if v is not None]
        return statistics.fmean(values) if values else None

    @property
    def reached(self) -> int:
        return sum(1 for t in self.times_to_target if t is not None)

    @property
    def time_to_target(self) -> float | None:
        """The mean time-to-target of the seeds that reached the target."""
        values = [t for t in self.times_to_target if t is not None]
        return statistics.fmean(values) if values else None


def seeds_of(record: Mapping[str, Any]) -> Seeds | None:
    """The cell's quality runs summarised, or None when it has none."""
    runs = [as_mapping(r) for r in as_mapping(record.get("quality")).get("runs") or []]
    if not runs:
        return None
    return Seeds(
        losses=tuple(finite(r.get("final_eval_loss")) for r in runs),
        accuracies=tuple(finite(r.get("final_eval_accuracy")) for r in runs),
        times_to_target=tuple(finite(r.get("time_to_target")) for r in runs),
        diverged_steps=tuple(r.get("diverged_step") for r in runs),
    )


def welch_greater(cell: Sequence[float], reference: Sequence[float]) -> tuple[float, float, float]:
    """(t, degrees of freedom, p) of a one-sided Welch t-test whose alternative is: ``cell``'s mean is greater.

    Both samples need two values or more. Without spread on either side, the means decide: a higher mean
    is certain (t = inf, p = 0), any other is not (t = 0 or -inf, p = 1).
    """
    diff = statistics.fmean(cell) - statistics.fmean(reference)
    if statistics.variance(cell) + statistics.variance(reference) == 0:
        if diff > 0:
            return math.inf, float(len(cell) + len(reference) - 2), 0.0
        return (0.0 if diff == 0 else -math.inf), float(len(cell) + len(reference) - 2), 1.0
    try:
        from scipy import stats
    except ImportError as exc:
        raise UsageError("quality verdicts need scipy's t distribution: pip install 'ampsuite[quality]'") from exc
    result = stats.ttest_ind(cell, reference, equal_var=False, alternative="greater")
    return float(result.statistic), float(result.df), float(result.pvalue)


@dataclass(frozen=True)
class QualityVerdict:
    """One cell held against its reference; the figures are over the seeds' final eval losses."""

    cell: str
    verdict: Verdict
    reference: str | None
    reason: str
    seeds: int
    mean: float | None
    std: float | None
    reference_mean: float | None = None
    reference_std: float | None = None
    rel_diff: float | None = None
    t: float | None = None
    df: float | None = None
    p: float | None = None
    time_to_target: float | None = None
    reached: int = 0
    accuracy: float | None = None

    def as_json(self) -> VerdictData:
        out = asdict(self)
        del out["accuracy"]
        for key in ("t", "df", "p", "rel_diff"):  # strict JSON: an infinite t is no number there
            if out[key] is not None and not math.isfinite(out[key]):
                out[key] = None
        return VerdictData(**out)  # type: ignore[typeddict-item]


def _judge(
    record: Record, own: Seeds, reference: Record | None, ref: Seeds | None, rule: QualityRule
) -> QualityVerdict:
    base: dict[str, Any] = {
        "cell": record["id"],
        "seeds": len(own.losses),
        "mean": own.mean,
        "std": own.std,
        "time_to_target": own.time_to_target,
        "reached": own.reached,
        "accuracy": own.accuracy,
        "reference": None if reference is None else reference["id"],
    }
    if own.diverged:
        step = min((s for s in own.diverged_steps if s is not None), default=None)
        where = "" if step is None else f" at step {step}"
        return QualityVerdict(verdict="diverged", reason=f"a seed's loss went non-finite{where}", **base)
    if reference is None or ref is None:
        name = rule.reference_of(str(record.get("combination")))
        return QualityVerdict(verdict="n/a", reason=f"no {name} cell with quality runs beside it", **base)
    if reference["id"] == record["id"]:
        return QualityVerdict(verdict="reference", reason="the reference itself", **base)
    base.update(reference_mean=ref.mean, reference_std=ref.std)
    if ref.diverged or ref.mean is None or own.mean is None:
        return QualityVerdict(verdict="n/a", reason=f"the reference {reference['id']} diverged", **base)
    if ref.mean == 0:
        rel = 0.0 if own.mean == 0 else math.copysign(math.inf, own.mean)
    else:
        rel = (own.mean - ref.mean) / abs(ref.mean)
    base["rel_diff"] = rel
    if rel < -rule.tolerance:
        return QualityVerdict(verdict="same quality", reason=f"lower than the reference ({rel:+.2%})", **base)
    if rel <= rule.tolerance:
        return QualityVerdict(verdict="same quality", reason=f"within {rule.tolerance:.2%} ({rel:+.2%})", **base)
    a, b = own.finite_losses, ref.finite_losses
    if len(a) < 2 or len(b) < 2:
        why = f"{rel:+.2%}, beyond {rule.tolerance:.2%}; one seed on a side: no spread to test"
        return QualityVerdict(verdict="worse", reason=why, **base)
    t, df, p = welch_greater(a, b)
    base.update(t=t, df=df, p=p)
    if p >= rule.p_value:
        why = f"{rel:+.2%}, beyond {rule.tolerance:.2%} but not significant (p = {p:.3g} >= {rule.p_value:g})"
        return QualityVerdict(verdict="same quality", reason=why, **base)
    return QualityVerdict(verdict="worse", reason=f"{rel:+.2%}, p = {p:.3g} < {rule.p_value:g}", **base)


def quality_verdicts(doc: AnyDocument) -> dict[str, QualityVerdict]:
    """Per cell id with quality runs (matrix order): its verdict. Empty for a run without ``[quality]``."""
    rule = quality_rule(doc)
    if rule is None:
        return {}
    groups: dict[Any, list[Record]] = {}
    for record in doc["cells"]:
        groups.setdefault(group_key(record), []).append(record)
    out: dict[str, QualityVerdict] = {}
    for record in doc["cells"]:
        own = seeds_of(record)
        if own is None:
            continue
        name = rule.reference_of(str(record.get("combination")))
        reference = next(
            (r for r in groups[group_key(record)] if r.get("combination") == name and seeds_of(r) is not None), None
        )
        out[record["id"]] = _judge(record, own, reference, None if reference is None else seeds_of(reference), rule)
    return out


def quality_reason(record: Mapping[str, Any], doc: AnyDocument, verdicts: Mapping[str, QualityVerdict]) -> str | None:
    """Why ``record`` may not be crowned for its quality (None when it may, or the run does not require it):
    its verdict is not "same quality" (nor is it the reference), or it has none."""
    rule = quality_rule(doc)
    if rule is None or not rule.require_same_quality:
        return None
    found = verdicts.get(str(record.get("id")))
    if found is None:
        return "no quality runs, and the suite requires the same quality"
    if found.verdict in ACCEPTED:
        return None
    if found.verdict == "n/a":
        return f"quality not judged: {found.reason}"
    if found.verdict == "diverged":
        return f"training diverged: {found.reason}"
    return f"trains worse than {found.reference}: {found.reason}"


def quality_summary(doc: AnyDocument) -> QualityVerdicts | None:
    """``run.quality``: the rule in words and every verdict, or None for a run without ``[quality]``."""
    rule = quality_rule(doc)
    if rule is None:
        return None
    return {"rule": rule.describe(), "verdicts": [v.as_json() for v in quality_verdicts(doc).values()]}


def _figure(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def statistic_text(v: QualityVerdict) -> str:
    """The numbers behind a verdict in a few words: the losses, their difference, and the test where one ran."""
    own = f"{_figure(v.mean)}" + ("" if v.std is None else f" \u00b1 {v.std:.4f}") + f" ({v.seeds} seeds)"
    if v.reference_mean is None or v.verdict == "reference":
        return own
    parts = [f"{own} vs {_figure(v.reference_mean)}"]
    if v.rel_diff is not None:
        parts.append(f"{v.rel_diff:+.2%}")
    if v.p is not None and v.t is not None and v.df is not None:
        parts.append(f"t = {v.t:.2f}, df = {v.df:.1f}, p = {v.p:.3g}")
    return ", ".join(parts)


def target_text(v: QualityVerdict, target: float | None) -> str:
    """Time-to-target in words: the mean seconds of the seeds that reached it, and how many did."""
    if target is None:
        return ""
    if v.time_to_target is None:
        return f"target {target:g} not reached"
    return f"target {target:g} in {v.time_to_target:.1f} s ({v.reached}/{v.seeds} seeds)"


def quality_lines(doc: AnyDocument) -> list[str]:
    """The verdicts in plain lines for the terminal (``ampsuite show``): the rule, then one line per cell."""
    rule = quality_rule(doc)
    verdicts = quality_verdicts(doc)
    if rule is None or not verdicts:
        return []
    cells = {r["id"]: r for r in doc["cells"]}
    width = max(len(c) for c in verdicts)
    lines = [f"quality, final eval loss over seeds ({rule.describe()}):"]
    for cell_id, v in verdicts.items():
        workload = str(as_mapping(cells[cell_id].get("workload")).get("id"))
        extra = [statistic_text(v), target_text(v, rule.targets.get(workload))]
        if v.verdict in ("diverged", "n/a"):
            extra = [v.reason]
        lines.append(f"  {cell_id:<{width}}  {v.verdict:<12}  " + "; ".join(e for e in extra if e))
    return lines
