"""The ``[quality]`` table: cells that also train to a budget on real data, judged against a reference recipe.

A suite with ``[quality]`` trains every single-process cell for a budget of
steps (or samples: tokens, images) after its numerics phase, evaluating the
held-out split every ``eval_every`` steps, in ``seeds`` processes (process i
from seed ``suite.seed + i``), before its speed is measured as usual. What a
verdict means, and how it is reached: docs/quality.md; the verdicts
themselves are :mod:`ampsuite.analysis.quality`'s.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ampsuite.spec import limits
from ampsuite.spec.tablereader import TableReader

__all__ = ["QUALITY_KEYS", "QualitySpec", "read_quality"]


@dataclass(frozen=True)
class QualitySpec:
    """A validated ``[quality]`` table."""

    steps: int = 0
    """Optimizer steps each seed trains, the numerics phase's included; 0: set by ``samples``."""
    samples: int = 0
    """Or the budget in the workload's unit (tokens, images): ``ceil(samples / samples per step)`` steps."""
    eval_every: int = 50
    """Steps between evaluations of the held-out split (and one after the last)."""
    eval_batches: int = 4
    """Batches of the cell's batch size each evaluation averages, spread over the held-out split."""
    seeds: int = 3
    """Worker processes a cell trains in, process i from seed ``suite.seed + i``."""
    reference: str = "fp32"
    """The combination every cell is judged against, but those named in ``references``."""
    references: Mapping[str, str] = field(default_factory=dict)
    """Combination -> its own reference (``fp8 = "bf16"``); every other combination is held against ``reference``."""
    tolerance: float = 0.0025
    """A mean final eval loss at most this much (relative) above the reference's is the same quality."""
    p_value: float = 0.05
    """Above the tolerance, a one-sided Welch t-test at this level decides "worse"."""
    targets: Mapping[str, float] = field(default_factory=dict)
    """Workload id -> the eval loss whose first reaching is timed (time-to-target)."""
    require_same_quality: bool = True
    """The report's best cell and tune's winner must be "same quality" (or the reference)."""

    def reference_of(self, combination: str) -> str:
        """The combination ``combination``'s cells are judged against."""
        return self.references.get(combination, self.reference)

    def plan(self, workload_id: str) -> dict[str, Any]:
        """What a worker of a cell of ``workload_id`` needs to train it (plain data)."""
        return {
            "steps": self.steps,
            "samples": self.samples,
            "eval_every": self.eval_every,
            "eval_batches": self.eval_batches,
            "target": self.targets.get(workload_id),
        }

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["references"], out["targets"] = dict(self.references), dict(self.targets)
        return out


QUALITY_KEYS = tuple(QualitySpec.__dataclass_fields__)
"""The keys of ``[quality]``: the fields of :class:`QualitySpec`; any other is refused."""


def _known(r: TableReader, key: str, name: str, known: list[str], what: str) -> None:
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"{what}s are: {', '.join(known)}"
        raise r.error(key, f"{name!r} is not a {what}; {hint}")


def read_quality(r: TableReader, combinations: Mapping[str, Any], workloads: list[str]) -> QualitySpec:
    """The ``[quality]`` table read by ``r``, its combination and workload names checked against the suite's."""
    r.refuse_unknown()
    steps = limits.MAX_SPEC_STEPS
    default = QualitySpec()
    budget_steps = r.number("steps", 0, minimum=0, maximum=steps * 100, integer=True)
    samples = r.number("samples", 0, minimum=0, maximum=limits.MAX_SEED, integer=True)
    if (budget_steps > 0) == (samples > 0):
        raise r.error("steps", "give the training budget as steps > 0 or as samples > 0 (one of the two)")
    given = "reference" in r.table
    reference = r.get("reference", str, default.reference, "a combination id")
    if not given and reference not in combinations:
        names = ", ".join(combinations)
        raise r.error("reference", f"not given, and its default {reference!r} is no combination: name one of {names}")
    _known(r, "reference", reference, list(combinations), "combination")
    references = r.get("references", dict, {}, "a table of combination = reference combination")
    for name, ref in references.items():
        _known(r, f"references.{name}", name, list(combinations), "combination")
        if not isinstance(ref, str):
            raise r.error(f"references.{name}", f"expected a combination id, got {ref!r}")
        _known(r, f"references.{name}", ref, list(combinations), "combination")
    targets = r.get("targets", dict, {}, "a table of workload id = eval loss")
    for name, value in targets.items():
        _known(r, f"targets.{name}", name, workloads, "workload id")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise r.error(f"targets.{name}", f"expected a finite number (an eval loss), got {value!r}")
    spec = QualitySpec(
        steps=budget_steps,
        samples=samples,
        eval_every=r.number("eval_every", default.eval_every, minimum=1, maximum=steps, integer=True),
        eval_batches=r.number("eval_batches", default.eval_batches, minimum=1, maximum=steps, integer=True),
        seeds=r.number("seeds", default.seeds, minimum=1, maximum=limits.MAX_PROCESSES, integer=True),
        reference=reference,
        references=dict(references),
        tolerance=r.number("tolerance", default.tolerance, minimum=0, maximum=1e6),
        p_value=r.number("p_value", default.p_value, minimum=0, maximum=1, strict=True, bound=limits.FRACTION),
        targets={k: float(v) for k, v in targets.items()},
        require_same_quality=r.get("require_same_quality", bool, default.require_same_quality, "true or false"),
    )
    r.finish()
    return spec
