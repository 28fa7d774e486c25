"""The ids of ``ampsuite tune``'s screens: short measurements of a cell, recorded beside its full one."""

from __future__ import annotations

__all__ = ["SCREEN_SUFFIX", "screen_id", "screened_cell"]

SCREEN_SUFFIX = "/screen"
"""What ends the id of a tune candidate's short screening measurement (``CELL_ID/screen``); a repeated screen of
the same cell, which ``ampsuite tune`` takes to confirm a small gain, ends in ``/screen-N`` (N = 2, 3, ...)."""


def screen_id(cell_id: str, repeat: int = 1) -> str:
    """The id of the ``repeat``-th screening measurement of the cell ``cell_id``."""
    return cell_id + SCREEN_SUFFIX + ("" if repeat == 1 else f"-{repeat}")


def screened_cell(record_id: str) -> str | None:
    """The id of the cell that ``record_id`` screens, or None when it is not a screen's id."""
    head, sep, tail = record_id.rpartition(SCREEN_SUFFIX)
    if not sep or (tail and not (tail.startswith("-") and tail[1:].isdigit())):
        return None
    return head
