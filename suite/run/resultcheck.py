"""Whether a worker's result can become a record, and the failed outcome that replaces one that cannot.

A plugin runs inside the worker and can put anything into metrics, notes or
diagnostics, of any size. The worker checks its own result before sending it
(a tensor would otherwise travel through torch's shared-memory pickling and be
lost when the worker exits; 100 MB of notes would be pickled through the pipe),
and the runner checks what arrives again: what it
writes must stay strict JSON, and a worker must not claim a status only the
runner can observe, and a result larger than a record may be
(``wire.MAX_RECORD_BYTES``) is refused where it enters, so that one record
never makes the whole results file unreadable. Both give the same
:func:`refused` outcome, so a malformed result is ``failed`` with
``MalformedResult`` in every mode.
"""

from __future__ import annotations

from typing import Any

from ampsuite.contract.wire import (
    ORDER,
    WORKER_STATUSES,
    Outcome,
    Status,
    WireError,
    check,
    json_problem,
    outcome,
    size_problem,
)

__all__ = ["FIELDS", "malformed", "refused"]

FIELDS: frozenset[str] = Outcome.__required_keys__ | Outcome.__optional_keys__
"""The parts a worker's result may have."""
_ALLOWED = ", ".join(s for s in ORDER if s in WORKER_STATUSES)


def malformed(result: Any) -> str | None:
    """Why a worker's result cannot become a record (None when it can), with the JSON path of the fault."""
    if not isinstance(result, dict):
        return f"expected a dict, got a {type(result).__name__}"
    unknown = sorted(str(k) for k in result if k not in FIELDS)
    if unknown:
        return f"unexpected field {unknown[0]!r}"
    status = result.get("status")
    if not isinstance(status, str) or status not in WORKER_STATUSES:
        return f"status {status!r} is not one of {_ALLOWED}"
    # JSON first: it names the deepest path (notes.x.y), where the type check stops at notes.x.
    problem = json_problem(result) or size_problem(result)
    if problem:
        return problem
    try:
        check(result, Outcome)
    except WireError as exc:
        return str(exc)
    return None


def refused(problem: str, stderr_tail: str) -> Outcome:
    """The ``failed`` outcome recorded instead of a malformed result (``problem`` from :func:`malformed`)."""
    return outcome(
        Status.FAILED,
        {"type": "MalformedResult", "message": f"malformed result from worker: {problem}", "stderr_tail": stderr_tail},
    )
