"""Small server-side SVG line charts (pure): canary vs stable across the analysis windows.

No JavaScript, no CDN: the page embeds the ``<svg>`` text. A missing value (None) breaks
the line; a threshold is drawn as a dashed line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 300, 140
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 44, 8, 22, 20


@dataclass(frozen=True)
class Series:
    label: str
    values: tuple[float | None, ...]
    color: str
    dashed: bool = False


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def _bounds(series: Sequence[Series]) -> tuple[float, float]:
    values = [v for s in series for v in s.values if v is not None and math.isfinite(v)]
    if not values:
        return 0.0, 1.0
    low, high = min(0.0, min(values)), max(values)
    if high <= low:
        high = low + (abs(low) or 1.0)
    return low, high * 1.08 if high > 0 else high


def _path(values: Sequence[float | None], x_of: list[float], y: float, span: float, low: float) -> str:
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    parts, pen_down = [], False
    for x, v in zip(x_of, values, strict=True):
        if v is None or not math.isfinite(v):
            pen_down = False
            continue
        py = y + plot_h - (v - low) / span * plot_h
        parts.append(f"{'L' if pen_down else 'M'}{x:.1f},{py:.1f}")
        pen_down = True
    return " ".join(parts)


def line_chart(title: str, series: Sequence[Series], x_labels: Sequence[str] = ()) -> str:
    """An SVG chart of ``series`` over the same x positions (the windows, in order)."""
    n = max((len(s.values) for s in series), default=0)
    low, high = _bounds(series)
    span = high - low
    plot_w = WIDTH - PAD_LEFT - PAD_RIGHT
    x_of = [PAD_LEFT + (plot_w * i / (n - 1) if n > 1 else plot_w / 2) for i in range(n)]
    top, bottom = PAD_TOP, HEIGHT - PAD_BOTTOM
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
           f'<text x="4" y="14" font-size="12" font-weight="bold">{escape(title)}</text>',
           f'<line x1="{PAD_LEFT}" y1="{bottom}" x2="{WIDTH - PAD_RIGHT}" y2="{bottom}" stroke="#999"/>',
           f'<line x1="{PAD_LEFT}" y1="{top}" x2="{PAD_LEFT}" y2="{bottom}" stroke="#999"/>',
           f'<text x="{PAD_LEFT - 4}" y="{top + 4}" font-size="10" text-anchor="end">{_fmt(high)}</text>',
           f'<text x="{PAD_LEFT - 4}" y="{bottom}" font-size="10" text-anchor="end">{_fmt(low)}</text>']
    for i, label in enumerate(x_labels[:n]):
        if n <= 8 or i in (0, n - 1):
            out.append(f'<text x="{x_of[i]:.1f}" y="{HEIGHT - 6}" font-size="9" text-anchor="middle">'
                       f'{escape(label)}</text>')
    legend_x = max(PAD_LEFT + 76, 14 + 7 * len(title))  # after the title (bold 12 px: ~7 px a character)
    for k, s in enumerate(series):
        dash = ' stroke-dasharray="4 3"' if s.dashed else ""
        d = _path(s.values, x_of, top, span, low)
        if d:
            out.append(f'<path d="{d}" fill="none" stroke="{s.color}" stroke-width="2"{dash}>'
                       f'<title>{escape(s.label)}</title></path>')
            for x, v in zip(x_of, s.values, strict=True):
                if v is not None and math.isfinite(v) and not s.dashed:
                    py = top + (bottom - top) - (v - low) / span * (bottom - top)
                    out.append(f'<circle cx="{x:.1f}" cy="{py:.1f}" r="2.5" fill="{s.color}">'
                               f'<title>{escape(s.label)} {_fmt(v)}</title></circle>')
        out.append(f'<text x="{legend_x + 52 * k}" y="14" font-size="10" fill="{s.color}">{escape(s.label)}</text>')
    if n == 0:
        out.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" font-size="11" text-anchor="middle">no data yet</text>')
    out.append("</svg>")
    return "".join(out)
