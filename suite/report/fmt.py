"""Number formatting shared by the HTML pages, the Markdown summary and the charts.

One place decides how many digits a figure gets, so a throughput reads the
same on every page. Missing values print as an em dash, never as "None".
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["DASH", "bytes_", "exact", "num", "pct", "ratio", "secs", "signed_pct", "tick"]

DASH = "\u2014"


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    result = float(value)
    return result if not math.isnan(result) else None


def num(value: Any) -> str:
    """A figure with about four significant digits and thousands separators."""
    v = _finite(value)
    if v is None:
        return DASH
    if math.isinf(v):
        return "\u221e" if v > 0 else "-\u221e"
    size = abs(v)
    if size >= 1000:
        return f"{v:,.0f}"
    if size >= 100:
        return f"{v:.0f}" if v.is_integer() else f"{v:.1f}"
    if size >= 10:
        return f"{v:.2f}"
    if size == 0:
        return "0"
    return f"{v:.3g}"


def ratio(value: Any) -> str:
    """A speedup: ``2.41\u00d7``."""
    v = _finite(value)
    return DASH if v is None else f"{v:.2f}\u00d7"


def pct(value: Any, digits: int = 1) -> str:
    """A fraction as a percentage: 0.0123 -> ``1.2%``."""
    v = _finite(value)
    if v is None:
        return DASH
    if math.isinf(v):
        return "\u221e"
    return f"{v * 100:.{digits}f}%"


def signed_pct(value: Any, digits: int = 1) -> str:
    """A relative change with its sign: ``+3.2%`` / ``-12.0%``."""
    v = _finite(value)
    return DASH if v is None else f"{v * 100:+.{digits}f}%"


def secs(value: Any) -> str:
    """A duration in the unit that keeps three significant digits readable."""
    v = _finite(value)
    if v is None:
        return DASH
    size = abs(v)
    if size == 0:
        return "0 s"
    if size < 1e-3:
        return f"{v * 1e6:.3g} \u00b5s"
    if size < 1:
        return f"{v * 1e3:.3g} ms"
    return f"{v:.3g} s"


def bytes_(value: Any) -> str:
    """A byte count in binary units: ``11.0 GiB``."""
    v = _finite(value)
    if v is None:
        return DASH
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(v) >= scale:
            return f"{v / scale:.2f} {unit}" if abs(v) < 10 * scale else f"{v / scale:.1f} {unit}"
    return f"{v:.0f} B"


def exact(value: Any) -> str:
    """The value exactly as stored (shortest round-tripping repr for floats), for tooltips."""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def tick(value: float) -> str:
    """An axis label: tick values are round, so the shortest form reads best (``2,000``, ``0.25``)."""
    return f"{value:,.6g}"
