"""The history page: each cell's throughput across commits (from asv or several results files).

The points come from :func:`suite.analysis.history`; this module charts them
(one line per cell, commits evenly spaced in date order) and tabulates the
exact values with their noise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from suite.analysis import HistoryPoint
from suite.report import charts
from suite.report.fmt import num, pct

__all__ = ["history_context"]


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
