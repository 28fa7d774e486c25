"""Names that become paths: a suite's name is a folder under ``reports/``.

A name is the user's to choose and is shown as written; only the path made
from it is a slug. The slug is one path component (no separator, no leading
dot, no ``..``) of at most :data:`MAX_COMPONENT` characters, so the output
stays under the folder the user chose and never ends in "File name too long".
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["MAX_COMPONENT", "path_component", "unsafe_name"]

MAX_COMPONENT = 64
"""Longest slug; far below the 255 bytes file systems allow, leaving room for suffixes."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


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
