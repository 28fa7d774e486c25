"""Whether a measured candidate may be chosen: passed, numerics healthy against FP32, noise within target.

The numerics rules are :func:`ampsuite.analysis.numerics_reason`, the report's. Tune differs from
the report's "best" in two deliberate ways: it requires the FP32 reference (it measured it),
and it does not require the report's wider "unstable" flag (an interquartile range over 10% of
the median), since on a shared CPU nearly every cell carries it and the noise of the median,
which the stopping rule targets, already prices the spread in. Throttled clocks (a thermal or
hardware slowdown, or a clock drop the power cap does not explain: see plugins/probes/clocks.py)
it does refuse, as the report does: such a figure measures the cooling, not the recipe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from ampsuite import analysis
from ampsuite.contract import wire

__all__ = ["as_record", "disturbed_reason", "numerics_reason", "untrusted_reason"]


def as_record(record: Mapping[str, Any]) -> wire.Record:
    """A record the runner built in this process (the shape the results loader checks in files)."""
    return cast(wire.Record, record)


Record = Mapping[str, Any]
Doc = Mapping[str, Any]


def _derived(record: Record, doc: Doc) -> analysis.Derived | None:
    return analysis.derive(doc).get(str(record.get("id")))


def numerics_reason(record: Record, doc: Doc) -> str | None:
    """Why ``record``'s training cannot be trusted (None when it can), judged against its FP32 cell in ``doc``.

    :func:`ampsuite.analysis.numerics_reason` (not passed, non-finite, collapsed scale, drift), the quality
    verdict where the suite requires the same quality (:func:`ampsuite.analysis.quality_reason`), and one rule
    of tune's own: a candidate must have a passed FP32 cell to be held against
    (tune measures FP32 first, so "no reference" means that cell failed, not that the
    suite has none, which the report tolerates).
    """
    derived = _derived(record, doc)
    if derived is None:
        return "not in the results document"
    reason = analysis.numerics_reason(as_record(record), derived)
    if reason is not None:
        return reason
    reason = analysis.quality_reason(record, doc, analysis.quality_verdicts(doc))
    if reason is not None:  # a quality suite that requires the same quality crowns no recipe that trains worse
        return reason
    if derived.numerics_verdict == "n/a":
        return "no passed FP32 cell with a finite loss to compare the loss with"
    return None


def untrusted_reason(record: Record, doc: Doc) -> str | None:
    """Why ``record`` is not a trustworthy figure (None when it is): :func:`numerics_reason`, its noise, then
    a disturbed timing (:func:`disturbed_reason`).

    The noise of the median (the relative standard error the stopping rule uses)
    must be within the run's ``noise_target``. The report's wider "unstable"
    flag (an interquartile range over 10% of the median) is not required: on a
    shared CPU nearly every cell carries it, and the noise already prices the spread in.
    """
    reason = numerics_reason(record, doc)
    if reason is not None:
        return reason
    own, target = analysis.noise(as_record(record)), analysis.noise_target(doc)
    if own is None:
        return "no noise estimate"
    if own > target:
        return f"noise {own:.2%} above target {target:.2%}"
    return disturbed_reason(record)


def disturbed_reason(record: Record) -> str | None:
    """The warning of ``record`` that says its timing measured something besides the recipe (None when there is
    none): throttled clocks (the clocks probe), a figure of the cooling, or a torch.compile compile during the
    timed steps (the compiled-graphs probe), a figure of the compiler. ``--resume`` measures such a record again.
    The power cap is no disturbance: it is the speed the GPU sustains."""
    disturbed = [
        w
        for w in analysis.instability_warnings(as_record(record))
        if "throttl" in w.lower() or ("during the timed steps" in w and "compiled" in w)
    ]
    return disturbed[0] if disturbed else None
