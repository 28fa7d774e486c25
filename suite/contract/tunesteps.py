"""The decisions of ``ampsuite tune``: each step of the search, what the search made of it, and a near miss's verdict.

Frozen, typed, and the one place their words come from: a :class:`Decision` says what the search made of a
measurement, :meth:`Step.describe` puts it in English for the tune page, tune.md and the recipe. Each goes to JSON
and back (``to_json``/``from_json``) as part of ``run.tune`` (:mod:`ampsuite.contract.tunerecords`, the summary).

Files of earlier versions are converted on load, in :meth:`Step.from_json`: a decision written as free text
becomes the :class:`Decision` it names, its particulars the step's ``detail``; text no decision of this
version names (the cross-run rules of earlier versions, such as "measured again in this run") is kept as it
reads, as :attr:`Decision.LEGACY`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ampsuite.contract import codec
from ampsuite.contract.validate import WIRE

__all__ = ["NOT_STARTED", "Decision", "Phase", "Step", "Verdict", "unconfirmed"]

NOT_STARTED = "not started (budget)"
"""The status of a step or an ablation row whose candidate the budget left unmeasured."""


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


class Decision(StrEnum):
    """What the search made of one measurement (:attr:`label` in words; a step adds its ``detail``)."""

    REFERENCE = "reference"
    """FP32 at a batch size: what numerics there are held against."""
    HEALTHY = "healthy"
    """A starting point with healthy numerics: a greedy path may start from it."""
    REJECTED = "rejected"
    """A screen that did not pass or whose numerics are not healthy."""
    NOT_FASTER = "not-faster"
    """A healthy screen the path did not take."""
    KEPT = "kept"
    """Clearly faster: the path, or the winner, takes it."""
    KEPT_TOGETHER = "kept-together"
    """A round's near misses screened together, clearly faster together."""
    HEAD_START = "head-start"
    """A later path's start with the leading recipe's companions, clearly faster than the start alone."""
    CONFIRMING = "confirming"
    """A screen repeated to test a near miss."""
    CONFIRMED = "confirmed"
    """A near miss kept: each of its screens beat each of the incumbent's (the detail gives the figures)."""
    NOT_CONFIRMED = "not-confirmed"
    """A near miss turned down (the detail says why)."""
    TRUSTED = "trusted"
    """A finalist's full record that may win."""
    STOOD_IN = "stood-in"
    """A full record at hand standing in for a finalist the budget left unmeasured."""
    NOT_TRUSTED = "not-trusted"
    """A finalist's full record that may not win."""
    NOT_BETTER = "not-better"
    """An option variant or batch size no faster than the winner."""
    NOT_MEASURED = "not-measured"
    """The budget left the candidate unmeasured: it was not found wanting."""
    PENDING = "pending"
    """Logged, and the run interrupted before its comparison ended."""
    LEGACY = "legacy"
    """Written by an earlier version in words no decision of this one names: the detail is that text."""

    @property
    def label(self) -> str:
        """The decision in words."""
        return _LABELS[self]

    @property
    def kept(self) -> bool:
        """Whether the candidate was taken (onto the path, or as the winner)."""
        return self in (Decision.KEPT, Decision.KEPT_TOGETHER, Decision.HEAD_START, Decision.CONFIRMED)


_LABELS = {
    Decision.REFERENCE: "reference",
    Decision.HEALTHY: "healthy",
    Decision.REJECTED: "rejected",
    Decision.NOT_FASTER: "not taken",
    Decision.KEPT: "kept",
    Decision.KEPT_TOGETHER: "kept: the round's near misses together",
    Decision.HEAD_START: "kept: the leading recipe's companions",
    Decision.CONFIRMING: "screened to confirm a near miss",
    Decision.CONFIRMED: "kept, confirmed",
    Decision.NOT_CONFIRMED: "not confirmed",
    Decision.TRUSTED: "trusted",
    Decision.STOOD_IN: "trusted: a record at hand, for a finalist the budget left unmeasured",
    Decision.NOT_TRUSTED: "not trusted",
    Decision.NOT_BETTER: "not better",
    Decision.NOT_MEASURED: "not measured: the budget was spent",
    Decision.PENDING: "undecided: the run was interrupted",
    Decision.LEGACY: "",
}

_VALUES = frozenset(d.value for d in Decision)
_BY_LABEL = {label: decision for decision, label in _LABELS.items() if label}
_BY_LABEL["not faster"] = Decision.NOT_FASTER  # earlier versions' label, wrong for a screen beaten only in its round
_OLD_PREFIXES = (
    ("kept: confirmed, ", Decision.CONFIRMED),
    ("not confirmed: ", Decision.NOT_CONFIRMED),
    ("not confirmed, ", Decision.NOT_CONFIRMED),
)
"""Free-text decisions of earlier versions that carried their particulars after the words."""


def _from_text(text: str) -> tuple[Decision, str]:
    """(decision, detail) of a decision an earlier version wrote as text."""
    if not text:
        return Decision.PENDING, ""
    if text in _BY_LABEL:
        return _BY_LABEL[text], ""
    for prefix, decision in _OLD_PREFIXES:
        if text.startswith(prefix):
            return decision, text[len(prefix) :]
    return Decision.LEGACY, text


def unconfirmed(why: str | None) -> str:
    """The detail of a near miss whose repeats could not be compared: ``why`` a repeat was not healthy, or None
    when the budget left one unmeasured."""
    return "the budget left a repeat unmeasured" if why is None else f"a repeat was not healthy ({why})"


@dataclass(frozen=True)
class Step(codec.JsonRecord):
    """One measurement of the search, and what the search made of it."""

    phase: Phase
    combination: str
    batch_size: int
    cell_id: str | None
    """None when the budget left the candidate unmeasured."""
    status: str
    """The record's status, or :data:`NOT_STARTED`."""
    throughput: float | None
    untrusted: str | None
    """Why the figure may not decide anything (numerics only for a screen), or None."""
    decision: Decision = field(default=Decision.PENDING, metadata={WIRE: str})
    """Files of earlier versions hold free text here (:meth:`from_json` converts it)."""
    detail: str = ""
    """The particulars: a near miss's figures, why it was not confirmed."""

    def describe(self) -> str:
        """The decision in words, with its particulars."""
        if self.status == NOT_STARTED and self.decision is Decision.REFERENCE:
            # A batch size's FP32 reference the budget left unstarted: it references nothing, and the winner was
            # not tried at that batch size without it.
            why = f"without an FP32 reference the winner was not tried at batch {self.batch_size}"
            return f"{Decision.NOT_MEASURED.label}; {why}"
        label = self.decision.label
        if not self.detail:
            return label
        return f"{label}: {self.detail}" if label else self.detail

    def decided(self, decision: Decision, detail: str = "") -> Step:
        return dataclasses.replace(self, decision=decision, detail=detail)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Step:
        """A step of ``run.tune`` (checked against this record's fields), of this version or an earlier one."""
        written = data["decision"]
        if "detail" not in data:
            decision, detail = _from_text(written)
        elif written in _VALUES:
            decision, detail = Decision(written), data["detail"]
        else:  # a newer version's decision: its words as they were written
            decision, detail = Decision.LEGACY, ": ".join(t for t in (written, data["detail"]) if t)
        return codec.from_json(cls, {**data, "decision": decision, "detail": detail})


@dataclass(frozen=True)
class Verdict:
    """A near miss's test, decided once per pair: the ``near`` candidate screened against the ``incumbent`` it would
    replace, alternately, three screens each; ``confirmed`` when each of its beat each of the incumbent's."""

    key: str
    """The workload configuration."""
    incumbent: str
    near: str
    confirmed: bool
    screens: str
    """The figures: ``NEAR'S, ... against INCUMBENT'S, ...``."""
    decided: str
    """When: ``on YYYY-MM-DD HH:MM UTC``."""

    @classmethod
    def reached(
        cls, pair: tuple[str, str, str], confirmed: bool, near: Sequence[float], incumbent: Sequence[float], now: str
    ) -> Verdict:
        """The verdict on ``pair`` (workload configuration, incumbent, near miss) from the screens' figures, at
        ``now`` (an ISO time)."""
        screens = f"{', '.join(f'{v:,.1f}' for v in near)} against {', '.join(f'{v:,.1f}' for v in incumbent)}"
        return cls(*pair, confirmed=confirmed, screens=screens, decided=f"on {now[:16].replace('T', ' ')} UTC")

    @property
    def pair(self) -> tuple[str, str, str]:
        """What it decides: (workload configuration, incumbent, near miss)."""
        return self.key, self.incumbent, self.near

    @property
    def decision(self) -> Decision:
        return Decision.CONFIRMED if self.confirmed else Decision.NOT_CONFIRMED

    def detail(self, earlier: bool) -> str:
        """The particulars of the near miss's step: the figures; ``earlier``: a verdict taken as it stands."""
        if earlier:
            return f"as decided {self.decided} (screens {self.screens})"
        if self.confirmed:
            return f"each of its screens faster than each of the incumbent's ({self.screens})"
        return f"screens {self.screens}"

    def to_json(self) -> dict[str, Any]:
        return codec.to_json(self)

    @classmethod
    def from_json(cls, data: Any) -> Verdict | None:
        """The verdict ``data`` holds, or None when it is damaged: such an entry decides nothing, and the pair is
        tested again."""
        names = [f.name for f in dataclasses.fields(cls) if f.name != "confirmed"]
        if not isinstance(data, dict) or not isinstance(data.get("confirmed"), bool):
            return None
        if not all(isinstance(data.get(name), str) for name in names):
            return None
        return cls(**{name: data[name] for name in (*names, "confirmed")})
