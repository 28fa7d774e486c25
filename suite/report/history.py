"""The history page: each cell's throughput across commits (from asv or several results files).

The points come from :func:`ampsuite.analysis.history`; this module charts them
(one line per cell, commits evenly spaced in commit order) and tabulates the
exact values with their noise.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ampsuite.analysis import HistoryPoint
from ampsuite.report import charts
from ampsuite.report.fmt import num, pct

__all__ = ["git_commit_order", "history_context", "in_commit_order"]


def _categories(points: Sequence[HistoryPoint]) -> list[str]:
    """Point labels made unique (a commit measured twice gets ``#2``)."""
    seen: dict[str, int] = {}
    out = []
    for point in points:
        seen[point.label] = seen.get(point.label, 0) + 1
        out.append(point.label if seen[point.label] == 1 else f"{point.label}#{seen[point.label]}")
    return out


def history_context(history: Mapping[str, Sequence[HistoryPoint]]) -> dict[str, Any]:
    cells = []
    for key, points in history.items():
        if not points:
            continue
        categories = _categories(points)
        series = charts.Series(key, [(c, p.throughput) for c, p in zip(categories, points, strict=True)])
        first, last = points[0].throughput, points[-1].throughput
        cells.append(
            {
                "key": key,
                "chart": charts.line_chart(
                    categories,
                    [series],
                    title=f"Throughput of {key} across commits",
                    x_label="commit",
                    y_label="throughput (workload unit per second)",
                    unit="per s",
                ),
                "change": f"{(last / first - 1) * 100:+.1f}%" if len(points) > 1 and first > 0 else "",
                "rows": [
                    {"label": c, "date": p.date, "throughput": num(p.throughput), "noise": pct(p.noise, 2)}
                    for c, p in zip(categories, points, strict=True)
                ],
            }
        )
    return {"cells": cells}


def git_commit_order(repo: str | Path = ".") -> dict[str, int]:
    """Position of every commit reachable from HEAD, oldest first (``git rev-list --topo-order``);
    empty outside a git repository."""
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-list", "--topo-order", "--reverse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {commit: i for i, commit in enumerate(out.split())}


def in_commit_order(
    history: Mapping[str, Sequence[HistoryPoint]], order: Mapping[str, int]
) -> dict[str, list[HistoryPoint]]:
    """Each cell's points in commit order where ``order`` knows every label (a commit hash or a prefix of
    one); otherwise in date order with commit order breaking ties. Dates alone are not an order: commits
    made within one second (a rebase, a merge) share a date."""
    by_prefix = {commit[:7]: i for commit, i in order.items()}

    def position(point: HistoryPoint) -> int | None:
        label = point.label.split("#", 1)[0]
        return by_prefix.get(label[:7]) if len(label) >= 7 else None

    out = {}
    for key, points in history.items():
        known = [position(p) for p in points]
        if points and all(i is not None for i in known):
            out[key] = sorted(points, key=lambda p: position(p) or 0)
        else:
            out[key] = sorted(points, key=lambda p: (p.date, position(p) or 0))
    return out
