"""Small inline-SVG charts: lines with points, horizontal bars, sparklines.

The report must work from file:// with no network and no scripts, so charts
are plain SVG written here. Every drawn mark (``rect``, ``path``, ``circle``)
carries a ``<title>`` with the exact value, which browsers show as a tooltip.
All text is escaped here; the functions return :class:`markupsafe.Markup`
so that templates insert them as they are.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape

from markupsafe import Markup

from ampsuite.report.fmt import exact, num, tick

__all__ = [
    "DASHES",
    "PALETTE",
    "Bar",
    "Series",
    "bar_chart",
    "grouped_bar_chart",
    "line_chart",
    "nice_ticks",
    "series_style",
    "sparkline",
]

PALETTE = ("#0b6bcb", "#e08a00", "#1a9e6f", "#d1495b", "#8e5cc4", "#3fa7d6", "#8c564b", "#6b7280")
"""Distinguishable on white and for the common colour-vision deficiencies (after Okabe-Ito)."""
DASHES = ("", "7 4", "2 3", "9 3 2 3")
"""Line patterns. Each round of :data:`PALETTE`'s colours takes the next one, so a chart with more series
than colours (ten combinations, twelve seeds) still draws each series its own way, the same every time."""
LEGEND_ROW = 18
"""Height of a legend row (a colour key and its name) in SVG units."""
VALUE_CHAR_PX = 6.5
"""The most a character of a bar's printed value (11 px) is wide: a marker is kept off the value's span."""

TONES = {"normal": "#0b6bcb", "good": "#1a9e6f", "bad": "#d1495b", "muted": "#9ca3af", "warn": "#e08a00"}

Formatter = Callable[[float], str]


def series_style(k: int) -> tuple[str, str]:
    """The colour and dash pattern (``""``: solid) of a chart's series number ``k``."""
    return PALETTE[k % len(PALETTE)], DASHES[(k // len(PALETTE)) % len(DASHES)]


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _title(text: str) -> str:
    return f"<title>{_e(text)}</title>"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (1, 2, 2.5, 5 x 10^k steps)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0, 1.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.floor(low / step) * step
    ticks: list[float] = []
    value = start
    while value < high + step * 0.5 and len(ticks) < 50:
        ticks.append(round(value, 12))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 12))
    return ticks


def _svg_open(width: int, height: int, title: str, css: str = "chart") -> str:
    return (
        f'<svg class="{css}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{_e(title)}" xmlns="http://www.w3.org/2000/svg" '
        f'preserveAspectRatio="xMinYMin meet">{_title(title)}'
    )


def _empty(title: str, message: str) -> Markup:
    return Markup(f'<p class="chart-empty">{_e(title)}: {_e(message)}</p>')


@dataclass(frozen=True)
class Series:
    """One line: points as (category, value); categories not in the chart are ignored. A bar chart marks the
    categories in ``untrusted`` (category: why) as the report's tables do."""

    name: str
    points: Sequence[tuple[str, float]]
    untrusted: Mapping[str, str] = field(default_factory=dict)


def line_chart(
    categories: Sequence[str],
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    unit: str = "",
    tick_fmt: Formatter = tick,
    from_zero: bool = True,
) -> Markup:
    """A line per series over evenly spaced categories (batch sizes, training steps), y from zero unless
    ``from_zero`` is False (then from the lowest value's tick: loss curves)."""
    values = [v for s in series for _, v in s.points if math.isfinite(v)]
    if not categories or not values:
        return _empty(title, "no data")
    width, left, right, top = 720, 72, 16, 16
    plot_h = 240
    height = top + plot_h + 44 + math.ceil(len(series) / 3) * LEGEND_ROW + 8
    ticks = nice_ticks(0.0 if from_zero else min(values), max(values))
    y_min, y_max = (0.0 if from_zero else ticks[0]), ticks[-1] or 1.0
    plot_w = width - left - right
    step = plot_w / max(len(categories), 1)
    xs = {c: left + step * (i + 0.5) for i, c in enumerate(categories)}

    def y(v: float) -> float:
        return top + plot_h - plot_h * (v - y_min) / ((y_max - y_min) or 1.0)

    out = [_svg_open(width, height, title)]
    out.append('<g class="axis" font-size="11" fill="#4b5563">')
    for t in ticks:
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y(t):.1f}" y2="{y(t):.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{_e(tick_fmt(t))}</text>')
    for c, x in xs.items():
        out.append(f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{_e(c)}</text>')
    out.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h + 34}" text-anchor="middle" class="label">'
        f"{_e(x_label)}</text>"
    )
    out.append(
        f'<text transform="translate(14 {top + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle" class="label">'
        f"{_e(y_label)}</text></g>"
    )
    for index, s in enumerate(series):
        color, dash = series_style(index)
        pattern = f' stroke-dasharray="{dash}"' if dash else ""
        # A patterned series' points are hollow, so a one-point series differs from its colour's first use too.
        point = f'fill="#fff" stroke="{color}" stroke-width="2"' if dash else f'fill="{color}"'
        pts = [(xs[c], y(v), c, v) for c, v in s.points if c in xs and math.isfinite(v)]
        if len(pts) > 1:
            d = " ".join(f"{'M' if i == 0 else 'L'}{px:.1f},{py:.1f}" for i, (px, py, _, _) in enumerate(pts))
            out.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="2"{pattern}>{_title(s.name)}</path>')
        for px, py, c, v in pts:
            tip = f"{s.name} \u00b7 {x_label} {c}: {exact(v)} {unit}".rstrip()
            out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" {point}>{_title(tip)}</circle>')
    out.append(_legend(series, left, top + plot_h + 48, plot_w, 3, 34, lines=True))
    out.append("</svg>")
    return Markup("".join(out))


@dataclass(frozen=True)
class Bar:
    """One horizontal bar.

    ``marker`` draws a tick at another value on the same scale (a measured
    peak); ``tone`` picks the colour: normal, good, bad, warn or muted.
    """

    label: str
    value: float
    tooltip: str = ""
    marker: float | None = None
    marker_label: str = ""
    tone: str = "normal"


def _wrap(label: str) -> list[str]:
    """A bar's label in lines of at most 30 characters: it is never cut, its row grows instead."""
    return textwrap.wrap(label, 30, break_on_hyphens=False) or [label]


def _row_label(lines: Sequence[str], label: str, right: float, middle: float, line: int = 14) -> str:
    """``lines`` right-aligned at ``right``, centred on ``middle``, the whole label in the tooltip."""
    first = middle + 4 - line * (len(lines) - 1) / 2
    spans = "".join(f'<tspan x="{right}" y="{first + i * line:.1f}">{_e(t)}</tspan>' for i, t in enumerate(lines))
    return f'<text text-anchor="end" font-size="12">{spans}{_title(label)}</text>'


def _bar_paint(k: int) -> str:
    """The fill of series ``k``'s bars: its colour, and past the palette's first round a pale fill with a
    patterned outline of that colour."""
    color, dash = series_style(k)
    if not dash:
        return f'fill="{color}"'
    return f'fill="{color}" fill-opacity="0.3" stroke="{color}" stroke-width="1.5" stroke-dasharray="{dash}"'


def _legend(
    series: Sequence[Series], left: float, top: float, width: float, columns: int, chars: int, *, lines: bool = False
) -> str:
    """A key per series (a stroke of its line when ``lines``, else a swatch of its bars), ``columns`` to a row
    across ``width`` from ``left``, the first row's text at ``top``; names cut to ``chars`` characters (the
    whole one is in the key's tooltip)."""
    out = []
    for k, s in enumerate(series):
        lx = left + (k % columns) * (width / columns)
        ly = top + (k // columns) * LEGEND_ROW
        color, dash = series_style(k)
        if lines:
            pattern = f' stroke-dasharray="{dash}"' if dash else ""
            key = (
                f'<path d="M{lx:.1f},{ly - 3} L{lx + 22:.1f},{ly - 3}" stroke="{color}" stroke-width="3"{pattern}>'
                f"{_title(s.name)}</path>"
            )
        else:
            key = (
                f'<rect x="{lx:.1f}" y="{ly - 9}" width="12" height="12" rx="2" {_bar_paint(k)}>{_title(s.name)}</rect>'
            )
        out.append(
            f'<g class="legend">{key}<text x="{lx + (28 if lines else 18):.1f}" y="{ly + 1}" font-size="12">'
            f"{_e(s.name if len(s.name) <= chars else s.name[: chars - 1] + chr(0x2026))}</text></g>"
        )
    return "".join(out)


def _value_axis(
    ticks: Sequence[float],
    x: Callable[[float], float],
    top: float,
    bottom: float,
    middle: float,
    unit: str,
    tick_fmt: Formatter,
) -> str:
    """The horizontal bar charts' value axis: a grid line and a label per tick, the unit centred below."""
    out = ['<g class="axis" font-size="11" fill="#4b5563">']
    for t in ticks:
        out.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top}" y2="{bottom}" class="grid"/>')
        out.append(f'<text x="{x(t):.1f}" y="{bottom + 14}" text-anchor="middle">{_e(tick_fmt(t))}</text>')
    if unit:
        out.append(f'<text x="{middle:.1f}" y="{bottom + 30}" text-anchor="middle" class="label">{_e(unit)}</text>')
    out.append("</g>")
    return "".join(out)


def bar_chart(
    bars: Sequence[Bar],
    *,
    title: str,
    unit: str = "",
    fmt: Formatter = num,
    tick_fmt: Formatter = tick,
    reference: float | None = None,
    reference_label: str = "",
) -> Markup:
    """Horizontal bars with the value printed at the end; an optional reference line (1.0x, a tolerance). A label
    is never cut: it wraps onto as many lines as it needs, and its row grows with it."""
    shown = [b for b in bars if math.isfinite(b.value)]
    if not shown:
        return _empty(title, "no data")
    width, left, right, top, line = 720, 230, 90, 12, 14
    plot_w = width - left - right
    labels = [_wrap(b.label) for b in shown]
    rows = [max(24, line * len(ls) + 10) for ls in labels]
    bottom = top + sum(rows)
    extent = [b.value for b in shown] + [v for v in (reference, *(b.marker for b in shown)) if v is not None]
    ticks = nice_ticks(min(0.0, *extent), max(0.0, *extent))
    lo, span = ticks[0], (ticks[-1] - ticks[0]) or 1.0

    def x(v: float) -> float:
        return left + plot_w * (v - lo) / span

    out = [_svg_open(width, bottom + 34, title), _value_axis(ticks, x, top, bottom, left + plot_w / 2, unit, tick_fmt)]
    y0 = top
    for b, ls, row in zip(shown, labels, rows, strict=True):
        x0, x1 = sorted((x(0.0), x(b.value)))
        middle = y0 + row / 2
        tip = f"{b.tooltip or b.label}: {exact(b.value)} {unit}".rstrip()
        out.append(_row_label(ls, b.label, left - 8, middle))
        out.append(
            f'<rect x="{x0:.1f}" y="{middle - row / 2 + 4:.1f}" width="{max(x1 - x0, 1.0):.1f}" height="{row - 8}" '
            f'rx="2" fill="{TONES.get(b.tone, TONES["normal"])}">{_title(tip)}</rect>'
        )
        text, text_x = fmt(b.value), max(x1, x(0.0)) + 6
        marker = b.marker if b.marker is not None and math.isfinite(b.marker) else None
        if marker is not None and text_x - 6 < x(marker) < text_x + VALUE_CHAR_PX * len(text):
            text_x = x(marker) + 6  # a peak just past the bar's end: the value goes after its tick, not under it
        out.append(f'<text x="{text_x:.1f}" y="{middle + 4:.1f}" font-size="11" fill="#374151">{_e(text)}</text>')
        if marker is not None:
            mx = x(marker)
            mtip = f"{b.marker_label or 'marker'}: {exact(marker)} {unit}".rstrip()
            out.append(
                f'<path d="M{mx:.1f},{y0 + 1} L{mx:.1f},{y0 + row - 1}" stroke="#111827" stroke-width="3" '
                f'class="marker">{_title(mtip)}</path>'
            )
        y0 += row
    if reference is not None:
        rx = x(reference)
        out.append(
            f'<path d="M{rx:.1f},{top - 4} L{rx:.1f},{bottom + 2}" stroke="#111827" stroke-width="1.5" '
            f'stroke-dasharray="4 3" class="reference">{_title(f"{reference_label}: {exact(reference)}")}'
            "</path>"
        )
    out.append("</svg>")
    return Markup("".join(out))


def grouped_bar_chart(
    categories: Sequence[str],
    series: Sequence[Series],
    *,
    title: str,
    unit: str = "",
    fmt: Formatter = num,
    tick_fmt: Formatter = tick,
) -> Markup:
    """Horizontal bars grouped by category, one bar per series in the series' colour (the same cell on
    several machines); a series without a point in a category leaves a gap, and a legend names the colours."""
    values = {(s.name, c): v for s in series for c, v in s.points if math.isfinite(v)}
    shown = [c for c in categories if any((s.name, c) in values for s in series)]
    if not shown or not series:
        return _empty(title, "no data")
    width, left, right, top, bar, gap = 720, 230, 120, 12, 14, 10
    plot_w = width - left - right
    labels = [_wrap(c) for c in shown]
    bands = [max(bar * len(series), 14 * len(ls)) + gap for ls in labels]
    bottom = top + sum(bands)
    height = bottom + 34 + math.ceil(len(series) / 2) * LEGEND_ROW + 8
    ticks = nice_ticks(0.0, max(values.values()))
    span = ticks[-1] or 1.0

    def x(v: float) -> float:
        return left + plot_w * v / span

    out = [_svg_open(width, height, title)]
    out.append(_value_axis(ticks, x, top, bottom, left + plot_w / 2, unit, tick_fmt))
    y0 = top
    for category, lines, band in zip(shown, labels, bands, strict=True):
        out.append(_row_label(lines, category, left - 8, y0 + (band - gap) / 2))
        for k, s in enumerate(series):
            value = values.get((s.name, category))
            if value is None:
                continue
            y = y0 + (band - gap - bar * len(series)) / 2 + k * bar
            why = s.untrusted.get(category)
            mark = f" (untrusted: {why})" if why else ""
            tip = f"{category} \u00b7 {s.name}: {exact(value)} {unit}".rstrip() + mark
            out.append(
                f'<rect x="{left}" y="{y + 1:.1f}" width="{max(x(value) - left, 1.0):.1f}" height="{bar - 2}" rx="2" '
                f"{_bar_paint(k)}>{_title(tip)}</rect>"
            )
            label = f'{_e(fmt(value))}<tspan fill="{TONES["warn"]}"> untrusted</tspan>' if why else _e(fmt(value))
            out.append(f'<text x="{x(value) + 6:.1f}" y="{y + bar - 3}" font-size="10" fill="#374151">{label}</text>')
        y0 += band
    out.append(_legend(series, 16, bottom + 48, width - 32, 2, 40))
    out.append("</svg>")
    return Markup("".join(out))


def sparkline(values: Sequence[float | None], *, title: str, log2: bool = False) -> Markup:
    """A small line of a sequence (GradScaler scale, losses); a dot with its exact value per point.

    Runs longer than 64 points get dots only at the first, last, lowest and highest values.
    """
    points = [(i, v) for i, v in enumerate(values) if v is not None and math.isfinite(v) and (v > 0 or not log2)]
    if not points:
        return _empty(title, "no finite values")
    width, height, pad = 200, 40, 5

    def scaled(v: float) -> float:
        return math.log2(v) if log2 else v

    ys = [scaled(v) for _, v in points]
    lo, hi = min(ys), max(ys)
    span = (hi - lo) or 1.0
    last = max(len(values) - 1, 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return pad + (width - 2 * pad) * i / last, height - pad - (height - 2 * pad) * (scaled(v) - lo) / span

    out = [_svg_open(width, height, title, css="chart sparkline")]
    coords = [xy(i, v) for i, v in points]
    d = " ".join(f"{'M' if k == 0 else 'L'}{px:.1f},{py:.1f}" for k, (px, py) in enumerate(coords))
    out.append(f'<path d="{d}" fill="none" stroke="#0b6bcb" stroke-width="1.5">{_title(title)}</path>')
    if len(points) <= 64:
        dots = points
    else:
        keep = {0, len(points) - 1, ys.index(lo), ys.index(hi)}
        dots = [p for k, p in enumerate(points) if k in keep]
    for i, v in dots:
        px, py = xy(i, v)
        out.append(
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.2" fill="#0b6bcb">{_title(f"step {i}: {exact(v)}")}</circle>'
        )
    out.append("</svg>")
    return Markup("".join(out))
