"""Names that become paths or parts of cell ids: a suite's name is a folder under ``reports/``; workload and
combination ids are the parts of each cell id.

A name is the user's to choose and is shown as written; only the path made
from it is a slug. The slug is one path component (no separator, no leading
dot, no ``..``) of at most :data:`MAX_COMPONENT` characters, so the output
stays under the folder the user chose and never ends in "File name too long".
"""

from __future__ import annotations

import hashlib
import json
import re

__all__ = ["MAX_COMPONENT", "MAX_ID", "path_component", "shown_id", "unsafe_id", "unsafe_name"]

MAX_COMPONENT = 64
"""Longest slug; far below the 255 bytes file systems allow, leaving room for suffixes."""
MAX_ID = 128
"""Longest workload or combination id: every table row and report heading shows it whole."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
_ID_SEPARATORS = "/[],"
"""What a cell id (``WORKLOAD[axis=value,...]/COMBINATION/bsN``) is split at, so no id may hold one."""


def unsafe_name(name: str) -> str | None:
    """Why ``name`` cannot name a suite (it would read as a path), or None."""
    if not name.strip():
        return "expected a non-empty name"
    parts = re.split(r"[/\\]", name)
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name) or any(p in (".", "..") for p in parts):
        return f"expected a name, not a path: {name[:80]!r} reads as a path outside reports/"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return f"expected a name without control characters, got {name[:80]!r}"
    return None


def unsafe_id(text: str, kind: str) -> str | None:
    """Why ``text`` cannot be a ``kind`` (workload or combination) id, or None.

    Both are parts of cell ids, which must read back unambiguously: a workload id
    ``toy[hidden=64]`` would make the same cell id as the axis cell of workload ``toy``.
    """
    if not text:
        return "expected a non-empty id"
    if any(c in _ID_SEPARATORS or c == " " for c in text):
        return f"{kind} ids may not contain '/', '[', ']', ',' or spaces"
    if not text.isprintable():
        return f"{kind} ids may not contain control characters or other whitespace"
    if text in (".", ".."):  # ``../fp32/bs8`` reads as a path wherever cell ids are shown or typed
        return f"expected an id, not {text!r}"
    if len(text) > MAX_ID:
        return f"expected an id of at most {MAX_ID} characters, got {len(text):,}"
    return None


def shown_id(table: str, text: str) -> str:
    """``TABLE.ID`` for a one-line message: quoted and escaped as a TOML key when ID holds what a line cannot
    (a newline), cut short when long."""
    cut = text[:60] + ("..." if len(text) > 60 else "")
    return f"{table}.{cut if text and text.isprintable() else json.dumps(cut)}"


def path_component(name: str) -> str:
    """A file-system-safe, bounded folder name for ``name``; the same name always gives the same slug.

    Names that are already safe and short are kept; any other gets a hash of the
    original appended, so two names that slug alike still differ.
    """
    slug = _UNSAFE.sub("-", name).strip("-").lstrip(".") or "suite"
    if slug == name and len(name) <= MAX_COMPONENT:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{slug[: MAX_COMPONENT - len(digest) - 1]}-{digest}"
