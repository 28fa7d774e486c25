"""How every child process of a run starts its life, and how its log is read back.

A cell's worker, the device-peaks process and each rank of a data-parallel
cell all start the same way (:func:`start_child`), so that each can be killed
with everything it started, dies with its parent, writes into the log the
runner keeps as evidence, and leaves Python stacks there when it crashes or
when the runner asks for them (:data:`STACKS_SIGNAL`, on a timeout).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
from pathlib import Path

__all__ = [
    "LOG_TAIL_BYTES",
    "STACKS_SIGNAL",
    "die_with_parent",
    "log_since",
    "log_size",
    "log_tail",
    "signal_name",
    "start_child",
]

LOG_TAIL_BYTES = 4000
"""How much of a log's end a record keeps (``stderr_tail``)."""
STACKS_SIGNAL = signal.SIGUSR1
"""Sent by the runner to a worker that timed out: faulthandler writes every thread's stack to the log."""
PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None) -> None:
    """Ask the kernel for SIGKILL when this process's parent dies (Linux), even by SIGKILL.

    No orphan keeps a GPU busy after the runner (or a rank's launcher) is gone.
    With ``parent_pid``, a parent that died before the request took effect ends
    this process at once.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def start_child(log_path: str | Path | None, *, new_session: bool = True, parent_pid: int | None = None) -> None:
    """Start a child's life: its own session, death with its parent, output to ``log_path``, faulthandler on.

    :param log_path: stdout and stderr are appended there; None keeps the inherited ones
        (a rank writes where its launcher, the cell's worker, writes).
    :param new_session: a session (and process group) of its own, so that the runner kills the
        child and every process it started at once; a rank stays in its launcher's group.
    :param parent_pid: see :func:`die_with_parent`.
    """
    if new_session:
        os.setsid()
    die_with_parent(parent_pid)
    if log_path is not None:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    # A SIGSEGV or SIGABRT kills the process before any Python handler runs:
    # faulthandler writes every thread's Python stack to the log first. The same
    # dump on STACKS_SIGNAL shows where a timed-out cell was stuck.
    faulthandler.enable(file=sys.stderr, all_threads=True)
    faulthandler.register(STACKS_SIGNAL, file=sys.stderr, all_threads=True)


def log_tail(path: str | Path | None, nbytes: int = LOG_TAIL_BYTES, start: int = 0) -> str:
    """The last ``nbytes`` of the log at ``path`` after offset ``start``, stripped ("" when unreadable)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(start, f.tell() - nbytes))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def log_since(path: str | Path, offset: int, nbytes: int) -> str:
    """At most ``nbytes`` of the log at ``path`` from ``offset`` on, stripped ("" when unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(nbytes).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def log_size(path: str | Path) -> int:
    """The log's size now (0 when it does not exist yet)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def signal_name(code: int | None) -> str | None:
    """The signal that ended a process with exit code ``code`` (negative, as multiprocessing reports it)."""
    if code is None or code >= 0:
        return None
    with contextlib.suppress(ValueError):
        return signal.Signals(-code).name
    return f"signal {-code}"
