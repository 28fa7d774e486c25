"""What may reach the terminal: the one function every text a plugin or a file supplies passes through.

Plugins name themselves, their records and options, write summaries, help and error messages; suite files and
results files hold names, ids and reasons. A terminal obeys control sequences in any of them (ESC ``[2J`` clears
the screen, OSC 8 makes a hidden link, a newline makes a one-line error two), so every such text is printed
through :func:`plain`, as text and never as rich markup. Imports nothing beyond the standard library:
``ampsuite`` prints its errors through it before anything else is loaded.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from typing import Any

__all__ = ["echo", "plain", "reader_gone"]

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""What a terminal obeys instead of showing: C0 and C1 controls (ESC starts CSI and OSC sequences; newlines and
tabs), DEL, line and paragraph separators, and the bidirectional marks and overrides that reorder what is shown."""


def plain(text: object) -> str:
    """``text`` as it may reach a terminal: every control character written as its Python escape (``\\x1b``,
    ``\\n``, ``\\u202e``), so that it is shown and never obeyed."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def echo(text: object, *, file: Any = None) -> None:
    """Print one line through :func:`plain` (for commands that print without a rich console)."""
    stream = file if file is not None else sys.stdout
    try:
        print(plain(text), file=stream, flush=True)
    except BrokenPipeError:
        reader_gone(stream)


def reader_gone(stream: Any) -> None:
    """Point ``stream``'s file at /dev/null: whoever read it (``| head``) has gone.

    As after SIGHUP, the command goes on and what it would have printed is discarded; its files are written as
    usual. Without this a closed pipe would end a run halfway, or Python would report the unwritable buffer at exit.
    """
    with contextlib.suppress(OSError, ValueError, AttributeError):
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, stream.fileno())
        finally:
            os.close(null)
