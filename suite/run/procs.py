"""How every child process of a run starts its life, and how its log is read back.

A cell's worker, the device-peaks process and each rank of a data-parallel
cell all start the same way (:func:`start_child`), so that each can be killed
with everything it started, dies with its parent, writes into the log the
runner keeps as evidence, and leaves Python stacks there when it crashes or
when the runner asks for them (:data:`STACKS_SIGNAL`, on a timeout).

Everything a cell starts ends with the cell. A worker is a child subreaper (Linux): a process its code starts
stays in its tree even when it leaves the worker's process group (a session of its own) or its parent exits (a
double fork), instead of being handed to init. The worker ends its tree before it exits (:func:`end_descendants`),
and the runner ends it, worker included, when it stops a worker (:func:`kill_tree`, then the process group).
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing
import os
import signal
import sys
from pathlib import Path

from ampsuite.run.signals import restore_defaults

__all__ = [
    "LOG_TAIL_BYTES",
    "STACKS_SIGNAL",
    "become_subreaper",
    "descendants",
    "die_with_parent",
    "end_descendants",
    "kill_tree",
    "log_line",
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
PR_SET_CHILD_SUBREAPER = 36
LINUX = sys.platform.startswith("linux")


def _prctl(option: int, value: int) -> None:
    if LINUX:
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value)


def die_with_parent(parent_pid: int | None = None) -> None:
    """Ask the kernel for SIGKILL when this process's parent dies (Linux), even by SIGKILL.

    No orphan keeps a GPU busy after the runner (or a rank's launcher) is gone.
    With ``parent_pid``, a parent that died before the request took effect ends
    this process at once.
    """
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def become_subreaper() -> None:
    """Linux: orphans below this process are re-parented to it rather than to init, so they stay in its tree."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def _parents() -> dict[int, int]:
    """pid -> parent pid of every live process (Linux /proc; empty elsewhere). Zombies are left out: they are
    dead already and wait only to be reaped."""
    found: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rpartition(b")")[2].split()  # the name before ")" may hold anything
            except OSError:  # gone meanwhile
                continue
            if len(fields) > 1 and fields[0] not in (b"Z", b"X"):
                found[int(entry.name)] = int(fields[1])
    return found


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``, parents before their children."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def kill_tree(pid: int, *, with_root: bool = True) -> list[int]:
    """SIGKILL every process below ``pid`` (and ``pid`` itself with ``with_root``); the pids killed.

    Each is stopped first, and the tree walked again until it holds no process not yet stopped: a process that
    forks while it is being walked cannot leave a child behind it.
    """
    if with_root:
        _signal(pid, signal.SIGSTOP)
    stopped: list[int] = []
    while fresh := [p for p in descendants(pid) if p not in stopped]:
        for p in fresh:
            _signal(p, signal.SIGSTOP)
        stopped += fresh
    doomed = [pid, *stopped] if with_root else stopped
    for p in doomed:
        _signal(p, signal.SIGKILL)
    return doomed


def end_descendants() -> None:
    """End everything this process started (a worker before it exits: a cell leaves no process behind)."""
    if LINUX:
        kill_tree(os.getpid(), with_root=False)


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
        become_subreaper()
    die_with_parent(parent_pid)
    restore_defaults()
    # A worker, node or peaks process inherits "forkserver" from the fork server, a rank "spawn" from its
    # launcher; with the platform's default, the processes a cell starts (a DataLoader's workers) start as in a
    # plain script or a torchrun rank. Where that default is fork (Linux before Python 3.14), a library's lock is
    # also unlinked as it is made: tqdm keeps one per process on a class attribute (torch.fx's interpreter makes
    # a bar while compiling), never collected, so a forkserver lock stayed registered with the run's resource
    # tracker after the worker's os._exit and the run ended with a "leaked semaphore objects" warning.
    multiprocessing.set_start_method(None, force=True)
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


def log_line(line: str) -> None:
    """Write ``line`` and its newline to stderr in one write (the cell's log, which its processes share).

    Non-interactive stderr writes through to the file at each write, so ``print`` makes two writes, the text and
    then the newline: two ranks starting at the same moment can write into each other's line, and the runner
    then misses a start line it looks for in the log (:func:`ampsuite.run.nodes.measure_nodes`).
    """
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


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
