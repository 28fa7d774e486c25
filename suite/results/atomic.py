"""Writing a JSON file so that a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["TooLarge", "make_parent", "write_json_atomic"]

FILE_MODE = 0o644
"""Readable by anyone the umask allows: results and caches are shared, unlike mkstemp's private 0600."""


class TooLarge(ValueError):
    """The JSON text is larger than the file may be; nothing was written."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size:,} bytes is more than {limit:,}")
        self.size = size
        self.limit = limit


def make_parent(path: Path) -> None:
    """Create the folder of ``path`` when missing.

    :raises NotADirectoryError: an ancestor is a file; its message names that file, where mkdir's EEXIST would
        only say that something exists.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        for parent in path.parents:
            if parent.exists() and not parent.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, f"{parent} is a file, not a directory", str(path)) from None
        raise


def write_json_atomic(
    path: str | Path,
    value: Any,
    *,
    indent: int | None = None,
    default: Callable[[Any], Any] | None = None,
    allow_nan: bool = False,
    max_bytes: int | None = None,
) -> None:
    """Write ``value`` as JSON to ``path``: a temporary file in the same folder, fsync, then ``os.replace``.

    The folder is created when missing; the temporary file is removed when anything fails
    (including serialising ``value``, which happens before the file exists).

    :raises TooLarge: when the text is longer than ``max_bytes`` (the file is left as it was).
    """
    path = Path(path)
    # No trailing newline: a results file cut anywhere, even just before one, must not load.
    text = json.dumps(value, indent=indent, default=default, allow_nan=allow_nan)
    if max_bytes is not None and len(text) > max_bytes:  # ensure_ascii: one byte a character
        raise TooLarge(len(text), max_bytes)
    make_parent(path)
    # Same folder: os.replace is only atomic within one file system. O_EXCL with a
    # unique name instead of mkstemp, so that the mode passes through the umask.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
