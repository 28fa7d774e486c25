"""One signal policy for every command: SIGINT, SIGTERM and SIGHUP interrupt; nothing after the first stops
what the first one started.

The first of them raises :class:`KeyboardInterrupt` where the command is, exactly as Ctrl-C does (a scheduler's
SIGTERM, scancel, a closed terminal's SIGHUP: each ends a run the same way), unless the command is writing what
it measured (:func:`deferred`): then it is remembered and the command ends when the writing is done. Every later
one is ignored, so an impatient second Ctrl-C cannot cut short the records of the remaining cells, the summary
or the report. SIGHUP also points the terminal's output at /dev/null: a closed terminal must not turn the
writing of the results into an I/O error. SIGKILL still stops everything at once; every results file write is
atomic, so what was written stays readable.

Processes that must outlive a Ctrl-C of the terminal's process group (the fork server, which would otherwise
print the traceback of an interrupted ``import torch``) start under :func:`blocked`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["SIGNALS", "Interrupts", "blocked", "deferred", "interrupts", "restore_defaults"]

SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
"""The signals that interrupt a command."""


class Interrupts:
    """The signal state of one command: which signal interrupted it first, and whether it is writing."""

    def __init__(self) -> None:
        self.received: str | None = None
        """The first interruption (``SIGINT``, ...; ``KeyboardInterrupt`` when it came another way); None: none yet."""
        self._writing = 0

    def handle(self, signum: int, frame: Any) -> None:
        if signum == getattr(signal, "SIGHUP", None):
            _detach_terminal()
        if self.received is not None:
            return  # the first one is being acted on
        self.received = signal.Signals(signum).name
        if not self._writing:
            raise KeyboardInterrupt(f"received {self.received}")

    def interrupted(self) -> None:
        """Note an interruption that reached the command another way (a cell's worker stopped by Ctrl-C): from
        now on every signal is ignored, as after the first one."""
        if self.received is None:
            self.received = "KeyboardInterrupt"

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Within the block a first signal is remembered instead of raised: what was measured is being written."""
        self._writing += 1
        try:
            yield
        finally:
            self._writing -= 1


_current: Interrupts | None = None


@contextlib.contextmanager
def interrupts(*, keep_ignoring: bool = False) -> Iterator[Interrupts]:
    """The policy for the block: installed on entry (or the one already installed, when blocks nest) and the
    previous handlers restored on exit.

    :param keep_ignoring: leave the signals ignored after the block instead of restoring the handlers: for the
        process's own command, whose exit code is decided once it returns (Python's teardown would otherwise
        die of a late Ctrl-C with 130 and print nothing).
    """
    global _current
    if _current is not None or threading.current_thread() is not threading.main_thread():
        yield _current or Interrupts()  # nested, or where Python lets no handler be set
        return
    policy = Interrupts()
    previous = {sig: signal.signal(sig, policy.handle) for sig in SIGNALS}
    _current = policy
    try:
        yield policy
    finally:
        _current = None
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_IGN if keep_ignoring else handler)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """:meth:`Interrupts.deferred` of the policy in force (nothing changes where none is)."""
    if _current is None:
        yield
        return
    with _current.deferred():
        yield


@contextlib.contextmanager
def blocked() -> Iterator[None]:
    """The interrupting signals held back for the block: a process started here ignores them (an ignored
    disposition is inherited across exec, where a blocked mask is not kept by Python's process spawning), while
    one that reaches this process meanwhile is not lost but delivered when the block ends. Linux keeps a blocked
    signal pending even while it is ignored ("blocked signals are never ignored"), and the handlers are back
    before the mask is lifted. Ignoring alone would drop a Ctrl-C that lands in the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def restore_defaults() -> None:
    """A child's own signal dispositions (a worker forked from the fork server, which blocks and ignores them):
    Ctrl-C raises, SIGTERM and SIGHUP end the process, as torch's elastic agent expects of the ranks it stops."""
    for sig in SIGNALS:
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def _detach_terminal() -> None:
    """Point stdout and stderr that are a terminal at /dev/null (SIGHUP: the terminal is gone)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        for fd in (1, 2):
            with contextlib.suppress(OSError):
                if os.isatty(fd):
                    os.dup2(null, fd)
    finally:
        os.close(null)
