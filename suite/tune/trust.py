"""Whether a measured candidate may be chosen: passed, numerics healthy against FP32, noise within target.

``untrusted_reason`` has the signature and meaning of the function another change
adds to :mod:`suite.analysis`; when that lands this module's copy can be swapped
for it. ``numerics_reason`` is its numerics half, what screening measurements
(too short to meet the noise target) are judged by.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from suite import analysis
from suite.contract import wire
from suite.contract.wire import Status

__all__ = ["numerics_reason", "untrusted_reason"]


def _as_record(record: Mapping[str, Any]) -> wire.Record:
    """A record the runner built in this process (the shape the results loader checks in files)."""
    return cast(wire.Record, record)


Record = Mapping[str, Any]
Doc = Mapping[str, Any]


def _derived(record: Record, doc: Doc) -> analysis.Derived | None:
    return analysis.derive(doc).get(str(record.get("id")))


def numerics_reason(record: Record, doc: Doc) -> str | None:
    """Why ``record``'s training cannot be trusted (None when it can), judged against its FP32 cell in ``doc``.

    Not passed; a non-finite loss (or unhandled non-finite gradients); a collapsed
    loss scale; no passed FP32 cell of the same configuration to compare with; or
    a loss after the same applied updates further from FP32's than the suite's
    ``numerics_tolerance``.
    """
    if record.get("status") != Status.PASSED:
        return f"status {record.get('status')}"
    derived = _derived(record, doc)
    if derived is None:
        return "not in the results document"
    if derived.numerics_verdict == "non-finite":
        numerics = analysis.as_mapping(record.get("numerics"))
        return f"non-finite {numerics.get('nonfinite_what') or 'loss'} at step {numerics.get('nonfinite_step')}"
    numerics = analysis.as_mapping(record.get("numerics"))
    if numerics.get("scale_collapsed_step") is not None:
        return f"loss scale collapsed at step {numerics.get('scale_collapsed_step')}"
    if derived.numerics_verdict == "n/a":
        return "no passed FP32 cell with a finite loss to compare the loss with"
    if derived.numerics_verdict == "drift":
        diff = derived.loss_rel_diff
        return f"loss {diff:.2%} from FP32, above the tolerance {analysis.numerics_tolerance(doc):.2%}"
    return None


def untrusted_reason(record: Record, doc: Doc) -> str | None:
    """Why ``record`` is not a trustworthy figure (None when it is): :func:`numerics_reason`, then its noise.

    The noise of the median (the relative standard error the stopping rule uses)
    must be within the run's ``noise_target``. The report's wider "unstable"
    flag (an interquartile range over 10% of the median) is not required: on a
    shared CPU nearly every cell carries it, and the noise already prices the spread in.
    """
    reason = numerics_reason(record, doc)
    if reason is not None:
        return reason
    own, target = analysis.noise(_as_record(record)), analysis.noise_target(doc)
    if own is None:
        return "no noise estimate"
    if own > target:
        return f"noise {own:.2%} above target {target:.2%}"
    return None
