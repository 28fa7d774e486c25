"""An interrupted run in one line: which cells it never ran, and the command line that runs them."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from ampsuite.contract.wire import Status

__all__ = ["NEVER_RAN", "interruption_line", "never_ran", "resume_command"]


def never_ran(record: Mapping[str, Any]) -> bool:
    """Whether ``record`` is a cell the run was interrupted before (or without) measuring at all."""
    reason = (record.get("evidence") or {}).get("reason")
    return record["status"] == Status.INTERRUPTED and str(reason).startswith(NEVER_RAN)


NEVER_RAN = ("not started", "not finished", "not run")
"""How the runner's reasons for an interrupted cell that never ran begin (ampsuite.run.runner)."""


def interruption_line(doc: Mapping[str, Any]) -> str | None:
    """One line for an interrupted run: how many cells it never ran, and the command that runs them."""
    cells = [r for r in doc["cells"] if r["status"] == Status.INTERRUPTED]
    if not cells:
        return None
    waiting = sum(1 for r in cells if never_ran(r))
    stopped = len(cells) - waiting
    parts = [f"{n} cell{'s' * (n != 1)} {what}" for n, what in ((stopped, "stopped"), (waiting, "not run")) if n]
    command = resume_command(doc)
    how = f"continue with: {command}" if command else "--resume continues it"
    return f"interrupted: {', '.join(parts)}; {how}"


RESUMABLE = ("run", "tune")


def resume_command(doc: Mapping[str, Any]) -> str | None:
    """The command line that continues ``doc``'s run: its own, with ``--resume`` (None when the file does not say
    which command wrote it)."""
    argv = [str(a) for a in (doc.get("run") or {}).get("argv") or []]
    if not any(a in RESUMABLE for a in argv[1:]):
        return None
    return shlex.join(["ampsuite", *argv[1:], *(["--resume"] * ("--resume" not in argv))])
