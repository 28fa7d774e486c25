"""Preloaded by the fork server, and imported nowhere else: its children stay quiet about a start the parent
abandoned.

CPython's fork-server client sends its request (the pipes) before it writes the new process's data. A Ctrl-C
that lands in the parent between the two abandons the start, but the fork server still forks a child, which
reads an empty pipe and prints ``EOFError: Ran out of input`` with its traceback, through ``sys.excepthook``,
into the terminal the run was interrupted from. That child has nothing to run, and the parent records its
cells as interrupted. Importing this module makes the fork server's hook pass over exactly that error: an
``EOFError`` raised inside ``multiprocessing.spawn._main`` (reading the process data). Every other exception
reaches the previous hook. The hook lives in the fork server alone: in any other process an ``EOFError`` there
means something else.
"""

from __future__ import annotations

import multiprocessing.spawn
import sys
from types import TracebackType

__all__ = ["hook", "is_abandoned_start"]

_previous = sys.excepthook


def is_abandoned_start(kind: type[BaseException], tb: TracebackType | None) -> bool:
    """Whether the exception is a fork-server child's read of process data the parent never wrote."""
    if not issubclass(kind, EOFError):
        return False
    while tb is not None:
        if tb.tb_frame.f_code is multiprocessing.spawn._main.__code__:
            return True
        tb = tb.tb_next
    return False


def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    if not is_abandoned_start(kind, tb):
        _previous(kind, value, tb)


sys.excepthook = hook
