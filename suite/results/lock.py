"""One run per results file: an exclusive ``flock`` on ``RESULTS.lock`` held for the whole run.

Two runs writing one file would each rewrite it from their own document, and
one run's records would be silently gone. ``flock`` is released by the kernel
when its holder dies, so a lock left by a killed run never blocks; the file
holds the holder's pid, host and command line only to name it in the refusal.

The lock file is removed on release. Removing it opens a race (a waiter may
lock the old, unlinked file while a newcomer locks a new one), so after
locking, the holder checks that the path still names the file it locked and
otherwise locks again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from ampsuite.contract.errors import OutputError, ResultsLockedError

__all__ = ["lock_path", "locked"]


def lock_path(results: Path) -> Path:
    """The lock file beside ``results``: ``results.json`` -> ``results.json.lock``."""
    return results.with_name(results.name + ".lock")


def _holder(fd: int) -> str:
    """What the holder wrote into the lock file, as a short phrase (or why it is not known)."""
    try:
        raw = os.pread(fd, 4096, 0)
        info = json.loads(raw.decode("utf-8", "replace") or "{}")
        argv = " ".join(str(a) for a in info.get("argv", []))[:120]
        return f"pid {int(info['pid'])} on {str(info['host'])[:60]}: {argv}".rstrip(": ")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "holder unknown"


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _acquire(path: Path, results: Path, wait: bool) -> int:
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                raise ResultsLockedError(str(results), _holder(fd)) from None
            if _same_file(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the previous holder removed the file we locked: lock the new one


@contextlib.contextmanager
def locked(results: Path, *, wait: bool = False, argv: Sequence[str] | None = None) -> Iterator[Path]:
    """Hold the lock of ``results`` for the block; yields the lock file's path.

    :raises ResultsLockedError: another process holds it and ``wait`` is false (exit code 4).
    :raises OutputError: the lock file cannot be created (read-only folder, full disk).
    """
    path = lock_path(results)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _acquire(path, results, wait)
    except OSError as exc:
        raise OutputError(str(path), exc) from None
    try:
        info = {"pid": os.getpid(), "host": socket.gethostname(), "argv": list(argv if argv is not None else sys.argv)}
        with contextlib.suppress(OSError):  # the note only names the holder; a full disk must not stop the run
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
        yield path
    finally:
        # Unlink while still holding the lock, so no one can have locked this file in between.
        with contextlib.suppress(OSError):
            if _same_file(fd, path):
                os.unlink(path)
        os.close(fd)
