"""The HTML report's charts, as hand-built inline SVG (no matplotlib, no request).

:func:`rate_chart` draws one bar per variant with its interval as a whisker;
:func:`interval_glyph` draws a comparison's interval and effect against the no-effect
line, small enough for a table cell. Names in them are escaped like all run text.
"""

from __future__ import annotations

import html
import math

from ..stats.comparisons import Comparison
from .headline import number
from .report import RateSummary, Report

__all__ = ["interval_glyph", "rate_chart"]

_num = number


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _interval(low: float | None, high: float | None) -> str:
    return f"[{_num(low)}, {_num(high)}]"


def rate_chart(report: Report, key: str, title: str) -> str:
    """Horizontal bars (the rate) with the interval as a whisker, one row per variant."""
    names = list(report.variants)
    label_w, plot_w, row_h = 160, 360, 26
    height = row_h * len(names) + 30
    parts = [
        f'<svg role="img" width="{label_w + plot_w + 20}" '
        f'height="{height}" aria-label="{_e(title)}"><title>{_e(title)}</title>'
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = label_w + tick * plot_w
        parts.append(
            f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{height - 18}" stroke="#e0e0e0"/>'
            f'<text x="{x:.1f}" y="{height - 4}" font-size="11" text-anchor="middle">'
            f"{tick:g}</text>"
        )
    for row, name in enumerate(names):
        rate: RateSummary | None = getattr(report.variants[name], key)
        y = row * row_h + 4
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 15}" font-size="12" text-anchor="end">'
            f"{_e(name)}</text>"
        )
        if rate is None or rate.estimate is None:
            continue
        width = rate.estimate * plot_w
        fill = "#8fb3e0" if name != report.control else "#c8c8cc"
        parts.append(
            f'<rect x="{label_w}" y="{y + 3}" width="{width:.1f}" height="16" fill="{fill}">'
            f"<title>{_e(name)}: {_num(rate.estimate)} "
            f"{_interval(rate.ci_low, rate.ci_high)}</title></rect>"
        )
        if rate.ci_low is not None and rate.ci_high is not None:
            x1, x2 = label_w + rate.ci_low * plot_w, label_w + rate.ci_high * plot_w
            parts.append(
                f'<line x1="{x1:.1f}" y1="{y + 11}" x2="{x2:.1f}" y2="{y + 11}" '
                f'stroke="#1d1d1f" stroke-width="2"/>'
                f'<line x1="{x1:.1f}" y1="{y + 6}" x2="{x1:.1f}" y2="{y + 16}" stroke="#1d1d1f"/>'
                f'<line x1="{x2:.1f}" y1="{y + 6}" x2="{x2:.1f}" y2="{y + 16}" stroke="#1d1d1f"/>'
            )
    parts.append("</svg>")
    return f"<figure><figcaption>{_e(title)}</figcaption>{''.join(parts)}</figure>"


def interval_glyph(c: Comparison) -> str:
    """A small inline SVG: the interval and the effect against the no-effect line."""
    null = 1.0 if c.scale == "ratio" else 0.0
    values = [v for v in (c.ci_low, c.ci_high, c.diff) if v is not None and math.isfinite(v)]
    if not values:
        return ""
    if c.scale == "ratio":
        if min(values) <= 0:
            return ""
        values = [math.log(v) for v in values]
        null = 0.0
    span = max(abs(v - null) for v in values) or 1.0
    width = 140

    def x(v: float) -> float:
        return width / 2 + (v - null) / span * (width / 2 - 6)

    def scaled(v: float | None) -> float | None:
        if v is None or not math.isfinite(v) or (c.scale == "ratio" and v <= 0):
            return None
        return math.log(v) if c.scale == "ratio" else v

    low, high, mid = scaled(c.ci_low), scaled(c.ci_high), scaled(c.diff)
    parts = [
        f'<svg width="{width}" height="16" role="img" '
        f'aria-label="interval"><line x1="{x(null):.1f}" y1="0" x2="{x(null):.1f}" y2="16" '
        'stroke="#999" stroke-dasharray="2,2"/>'
    ]
    if low is not None and high is not None:
        parts.append(
            f'<line x1="{x(low):.1f}" y1="8" x2="{x(high):.1f}" y2="8" stroke="#1d1d1f" '
            'stroke-width="2"/>'
        )
    if mid is not None:
        parts.append(f'<circle cx="{x(mid):.1f}" cy="8" r="3.5" fill="#2f6fbf"/>')
    parts.append("</svg>")
    return "".join(parts)
