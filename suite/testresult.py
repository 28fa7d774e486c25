"""What a suite run in a test left (:class:`SuiteResult`): records by id, statuses, and assertions that say why."""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampsuite.contract.wire import Status

if TYPE_CHECKING:
    from ampsuite.host.manager import Registry

__all__ = ["SuiteResult"]


@dataclass
class SuiteResult:
    """What one suite run left: the results document and ways to read and assert on it.

    Attributes:
        doc: the results document, exactly as written to ``path``.
        path: the results file.
        interrupted: whether the run was interrupted.
        registry: the plugins and records the run used.
        messages: warnings the run printed (e.g. a failing ``ampsuite_cell_finished``).
    """

    doc: dict[str, Any]
    path: Path
    interrupted: bool
    registry: Registry
    messages: list[str] = field(default_factory=list)

    @property
    def records(self) -> dict[str, dict[str, Any]]:
        """The cell records by cell id, in matrix order."""
        return {r["id"]: r for r in self.doc["cells"]}

    @property
    def ids(self) -> list[str]:
        return [r["id"] for r in self.doc["cells"]]

    def record(self, cell_id: str) -> dict[str, Any]:
        """One cell's record; a KeyError that lists the ids when there is no such cell."""
        records = self.records
        if cell_id not in records:
            close = difflib.get_close_matches(cell_id, list(records), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise KeyError(f"no cell {cell_id!r}; {hint}cells are: {', '.join(records) or '(none)'}")
        return records[cell_id]

    def select(self, pattern: str) -> list[dict[str, Any]]:
        """Records whose id matches a glob pattern (``"lstm/*"``, ``"*/bs8"``)."""
        return [r for r in self.doc["cells"] if fnmatch.fnmatchcase(r["id"], pattern)]

    def status(self, cell_id: str) -> str:
        return str(self.record(cell_id)["status"])

    def statuses(self) -> dict[str, str]:
        return {r["id"]: r["status"] for r in self.doc["cells"]}

    def metrics(self, cell_id: str) -> dict[str, Any]:
        return dict(self.record(cell_id)["metrics"])

    def notes(self, cell_id: str) -> dict[str, Any]:
        """What the cell's techniques wrote into ``step.notes``."""
        return dict(self.record(cell_id)["notes"])

    def numerics(self, cell_id: str) -> dict[str, Any]:
        return dict(self.record(cell_id)["numerics"] or {})

    def evidence(self, cell_id: str) -> dict[str, Any]:
        """Why a cell did not pass: a skip reason, an error with traceback, a crash's stderr."""
        return dict(self.record(cell_id)["evidence"] or {})

    def describe(self, record: Mapping[str, Any]) -> str:
        """One cell as one line: id, status and the gist of its evidence."""
        evidence = record.get("evidence") or {}
        if "reason" in evidence:
            gist = evidence["reason"]
        elif "type" in evidence:
            gist = f"{evidence['type']}: {evidence.get('message', '')} (in {evidence.get('phase', '?')})"
        elif evidence:
            gist = ", ".join(f"{k}={v!r}" for k, v in evidence.items() if k != "stderr_tail")
        else:
            gist = ""
        return f"{record['id']}: {record['status']}" + (f" ({gist})" if gist else "")

    def _fail(self, headline: str, records: Sequence[Mapping[str, Any]]) -> None:
        lines = [headline, *("  " + self.describe(r) for r in records)]
        for r in records:
            evidence = r.get("evidence") or {}
            detail = evidence.get("traceback") or evidence.get("stderr_tail")
            if detail:
                lines.append(f"--- {r['id']} ---\n{detail}")
        raise AssertionError("\n".join(lines))

    def assert_all_passed(self, *, allow_skipped: bool = False) -> None:
        """Every cell passed (or was skipped, with ``allow_skipped``); at least one cell ran."""
        if not self.doc["cells"]:
            raise AssertionError("the suite expanded to no cells")
        ok = {Status.PASSED, Status.SKIPPED} if allow_skipped else {Status.PASSED}
        bad = [r for r in self.doc["cells"] if r["status"] not in ok]
        if bad:
            self._fail(f"{len(bad)} of {len(self.doc['cells'])} cells did not pass:", bad)

    def assert_status(self, pattern: str, status: str, *, reason: str | None = None) -> None:
        """Every cell matching the glob ``pattern`` (at least one) has ``status``.

        :param reason: a regular expression the skip reason or error message must match.
        """
        matched = self.select(pattern)
        if not matched:
            raise AssertionError(f"no cell matches {pattern!r}; cells are: {', '.join(self.ids) or '(none)'}")
        wrong = [r for r in matched if r["status"] != status]
        if wrong:
            self._fail(f"expected status {status!r} for {pattern!r}, got:", wrong)
        if reason is not None:
            for r in matched:
                evidence = r.get("evidence") or {}
                text = str(evidence.get("reason") or evidence.get("message") or "")
                if not re.search(reason, text):
                    raise AssertionError(f"{r['id']}: evidence {text!r} does not match {reason!r}")
