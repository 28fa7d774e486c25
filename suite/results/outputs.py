"""What an output path may replace: never an input of the same command, never an earlier run without a backup.

Every file ampsuite writes where a user pointed it (a results file, a report folder's copies of the results,
``--markdown``, ``selfcheck -o``) is claimed here first. The rules are the same for every command:

- an output that is one of the command's inputs (the same file, through any path or link) is refused in one
  line before anything is written: the input would be gone once the output is written;
- an existing file there that holds a run (an ampsuite results file) is renamed aside to :func:`backup_path`
  and the new path named; an identical copy is left as it is;
- anything else there (a page, a CSV, a summary ampsuite wrote before) is derived and simply replaced;
- a path of the wrong kind (a directory where a file goes, a file where a folder goes, an empty path) is refused in
  one line (:func:`file_target`, :func:`folder_target`) before anything runs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import filecmp
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from ampsuite.contract.errors import OutputError, UsageError

__all__ = [
    "backup_path",
    "check_copy",
    "claim",
    "copy_aside",
    "copy_into",
    "file_target",
    "folder_target",
    "holds_run",
    "refuse_inputs",
    "same_file",
    "set_aside",
]

_RUN_HEAD = re.compile(rb'\A\s*\{\s*"format"\s*:\s*"ampsuite-results"')
"""How every results file ampsuite writes begins (``format`` is its first key)."""

PathLike = str | os.PathLike[str]


def backup_path(out: Path) -> Path:
    """A free name for an earlier file at ``out``: ``NAME.STAMP.json`` after its mtime, then ``NAME.STAMP-1.json``, ...

    Two earlier runs can share the mtime's second (or a clock can be reset), and a
    rename onto an existing backup would silently replace it.
    """
    stamp = dt.datetime.fromtimestamp(out.stat().st_mtime, dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    candidate = out.with_name(f"{out.stem}.{stamp}{out.suffix}")
    n = 0
    while candidate.exists():
        n += 1
        candidate = out.with_name(f"{out.stem}.{stamp}-{n}{out.suffix}")
    return candidate


def copy_aside(out: Path) -> Path:
    """A copy of the file ``out`` at :func:`backup_path`, before records in it are replaced; its path."""
    backup = backup_path(out)
    shutil.copy2(out, backup)
    return backup


def set_aside(out: Path) -> Path:
    """Rename the file ``out`` to :func:`backup_path`; its new path.

    :raises UsageError: ``out`` is a directory: renaming it would hide everything in it under a name nobody chose.
    """
    if out.is_dir():
        raise UsageError(f"{out}: is a directory; an output file cannot take its place")
    backup = backup_path(out)
    out.rename(backup)
    return backup


def _not_a_folder(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` when it is not a directory (nothing can be created under it)."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def _kind_problem(path: Path, directory: bool) -> str | None:
    """Why ``path`` cannot be the directory (``directory``) or the file an output is: an existing path of the other
    kind, or one under a file (nothing can be created there); None when it can."""
    if path.exists() and path.is_dir() != directory:
        return "is a file, not a directory" if directory else "is a directory"
    blocker = _not_a_folder(path)
    return None if blocker is None else f"{blocker} is a file, not a directory"


def _given(value: str, flag: str, names: str) -> Path:
    if not value:  # it would silently mean the default, or ``.``
        raise UsageError(f"{flag} '': an empty path; {flag} names {names}")
    return Path(value)


def file_target(value: str, flag: str, names: str = "a file") -> Path:
    """``value`` as the path of a file an option (``flag``) names, or :class:`UsageError` in one line.

    Refused: an empty path, a directory (a run would rename the directory aside and write a file in its place), a
    path that ends with a separator, and a path under a file.
    """
    path = _given(value, flag, names)
    if not path.is_dir() and value.endswith(("/", os.sep)):  # Path() drops it: the folder meant becomes a file
        raise UsageError(f"{value}: ends with '/', as a directory does; {flag} names {names}")
    why = _kind_problem(path, directory=False)
    if why is not None:
        raise UsageError(f"{value}: {why}; {flag} names {names}")
    return path


def folder_target(value: str, flag: str, names: str = "a directory") -> Path:
    """``value`` as the path of a directory an option (``flag``) names (created later when missing), or
    :class:`UsageError` in one line: an empty path, an existing file or a path under one is refused."""
    path = _given(value, flag, names)
    why = _kind_problem(path, directory=True)
    if why is not None:
        raise UsageError(f"{value}: {why}; {flag} names {names}")
    return path


def same_file(a: PathLike, b: PathLike) -> bool:
    """Whether ``a`` and ``b`` name one file (links and ``..`` included; two missing paths by their resolved names)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def holds_run(path: Path) -> bool:
    """Whether ``path`` is a file that begins as an ampsuite results file does."""
    try:
        with open(path, "rb") as f:
            return bool(_RUN_HEAD.match(f.read(256)))
    except OSError:
        return False


def refuse_inputs(outputs: Iterable[PathLike], inputs: Iterable[PathLike | None], what: str = "the output") -> None:
    """:class:`UsageError` naming the first of ``outputs`` that is one of ``inputs`` (None and missing inputs
    are skipped): writing it would destroy what the command reads."""
    present = [Path(i) for i in inputs if i is not None and Path(i).exists()]
    for out in outputs:
        for source in present:
            if same_file(out, source):
                raise UsageError(
                    f"{out}: {what} would replace this input ({source}); choose another output path"
                    if Path(out) != source
                    else f"{out}: {what} would replace this input; choose another output path"
                )


def claim(target: Path, inputs: Iterable[PathLike | None] = (), what: str = "the output") -> Path | None:
    """Make ``target`` free to be written: refused when it is one of ``inputs``; an earlier run there is renamed
    aside (its new path is returned, for the caller to name); any other file is left to be replaced."""
    refuse_inputs([target], inputs, what)
    why = _kind_problem(target, directory=False)
    if why is not None:
        raise UsageError(f"{target}: {why}; {what} must be a file")
    if target.is_file() and holds_run(target):
        return set_aside(target)
    return None


def check_copy(source: Path, target: Path, inputs: Iterable[PathLike | None] = (), what: str = "the output") -> bool:
    """Whether copying ``source`` to ``target`` writes anything (not when ``target`` is ``source`` itself);
    :class:`UsageError` when ``target`` is another of ``inputs``."""
    if target.exists() and same_file(source, target):
        return False
    refuse_inputs([target], [i for i in inputs if i is None or not same_file(i, source)], what)
    return True


def copy_into(
    source: Path, target: Path, inputs: Iterable[PathLike | None] = (), what: str = "the output"
) -> Path | None:
    """Copy ``source`` to ``target`` under :func:`claim`'s rules; the path an earlier run there was renamed to.

    Nothing is written when ``target`` is ``source`` itself or already holds the same bytes.

    :raises OutputError: naming ``target`` when it cannot be written (shutil names the source in its error).
    """
    if not check_copy(source, target, inputs, what):
        return None
    if target.is_file() and filecmp.cmp(source, target, shallow=False):
        return None
    backup = claim(target, (), what)
    try:
        shutil.copyfile(source, target)
    except OSError as exc:
        if exc.filename2 is None and exc.filename is not None and same_file(exc.filename, source):
            raise  # reading the input failed, not writing: the caller names the input
        if exc.filename is None or not same_file(exc.filename, target):
            # The copy was begun: a cut-off results file in the site would fail its checksum where linked.
            with contextlib.suppress(OSError):
                target.unlink()
        raise OutputError(str(target), exc) from None
    return backup
