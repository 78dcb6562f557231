"""Inline SVG charts, written by hand: no JS, no fonts or files fetched, any browser draws them.

`bar_chart` draws one group of bars per budget and one bar per series (graph on / off, or per
host). A cell that produced no value (a crash, a hang) still gets a mark at the baseline in its
outcome's colour, so a missing bar reads as "failed" and never as "zero".
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from ddprobe.report.style import SERIES_COLOURS, outcome_colour
from ddprobe.runmodel import Series

_LEFT, _RIGHT, _TOP, _BOTTOM = 58, 16, 40, 46


def nice_step(span: float, ticks: int = 4) -> float:
    """A round tick step (1, 2, 2.5 or 5 x 10^k) that covers `span` in about `ticks` steps."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return float(m * mag)
    return float(10 * mag)


def _fmt(v: float, step: float) -> str:
    if step >= 1 and abs(v - round(v)) < 1e-9:
        return str(int(round(v)))
    return f"{v:.2f}".rstrip("0").rstrip(".")


def _a(v: object) -> str:
    return escape(str(v), quote=True)


def series_colour(i: int) -> str:
    return SERIES_COLOURS[i % len(SERIES_COLOURS)]


def bar_chart(series: Sequence[Series], *, title: str, unit: str, chart_id: str,
              width: int = 640, height: int = 300, digits: int = 2) -> str:
    budgets = sorted({p.budget for s in series for p in s.points})
    values = [p.value for s in series for p in s.points if p.value is not None]
    top = max(values) if values else 1.0
    step = nice_step(top * 1.1 if top > 0 else 1.0)
    ymax = step * math.ceil((top * 1.1 if top > 0 else 1.0) / step)
    pw, ph = width - _LEFT - _RIGHT, height - _TOP - _BOTTOM
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{_a(chart_id)}" '
           f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="{_a(title)}">',
           f'<title>{escape(title)}</title>',
           f'<text x="{_LEFT}" y="18" class="chart-title" font-size="14" font-weight="bold">'
           f'{escape(title)}</text>']

    def y(v: float) -> float:
        return _TOP + ph - (v / ymax) * ph

    tick = 0.0
    while tick <= ymax + 1e-9:
        yy = y(tick)
        out.append(f'<line x1="{_LEFT}" x2="{_LEFT + pw}" y1="{yy:.1f}" y2="{yy:.1f}" '
                   f'stroke="#e0e0e0" stroke-width="1"/>')
        out.append(f'<text x="{_LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end" font-size="11" '
                   f'fill="#555">{_fmt(tick, step)}</text>')
        tick += step
    out.append(f'<text x="14" y="{_TOP + ph / 2:.1f}" font-size="11" fill="#555" '
               f'transform="rotate(-90 14 {_TOP + ph / 2:.1f})" text-anchor="middle">'
               f'{escape(unit)}</text>')
    out.append(f'<line x1="{_LEFT}" x2="{_LEFT + pw}" y1="{_TOP + ph}" y2="{_TOP + ph}" '
               f'stroke="#333" stroke-width="1"/>')
    n = max(len(budgets), 1)
    gw = pw / n
    bw = min(48.0, gw * 0.78 / max(len(series), 1))
    for gi, b in enumerate(budgets):
        gx = _LEFT + gi * gw
        out.append(f'<text x="{gx + gw / 2:.1f}" y="{_TOP + ph + 18}" text-anchor="middle" '
                   f'font-size="12" class="x-label">budget {b}</text>')
        x0 = gx + (gw - bw * len(series)) / 2
        for si, s in enumerate(series):
            p = next((q for q in s.points if q.budget == b), None)
            if p is None or p.outcome == "not-run":
                continue
            x = x0 + si * bw
            tip = f"{s.name}, budget {b}: {p.outcome}"
            if p.value is not None:
                yy = y(p.value)
                tip += f", {p.value:.{digits}f} {unit}"
                out.append(f'<rect class="bar outcome-{_a(p.outcome)}" data-series="{_a(s.name)}"'
                           f' data-budget="{b}" data-value="{p.value}" x="{x + 1:.1f}" '
                           f'y="{yy:.1f}" width="{bw - 2:.1f}" height="{_TOP + ph - yy:.1f}" '
                           f'fill="{series_colour(si)}"><title>{escape(tip)}</title></rect>')
                if p.outcome != "ok":  # a bar that is there but wrong: outline it
                    out.append(f'<rect x="{x + 1:.1f}" y="{yy:.1f}" width="{bw - 2:.1f}" '
                               f'height="{_TOP + ph - yy:.1f}" fill="none" stroke-width="3" '
                               f'stroke="{outcome_colour(p.outcome)}"/>')
                out.append(f'<text x="{x + bw / 2:.1f}" y="{yy - 4:.1f}" text-anchor="middle" '
                           f'font-size="10" fill="#222">{p.value:.{digits}f}</text>')
            else:
                cx, cy = x + bw / 2, _TOP + ph - 8
                col = outcome_colour(p.outcome)
                out.append(f'<g class="mark outcome-{_a(p.outcome)}" data-series="{_a(s.name)}" '
                           f'data-budget="{b}"><title>{escape(tip)}</title>'
                           f'<path d="M{cx - 5:.1f} {cy - 5:.1f} L{cx + 5:.1f} {cy + 5:.1f} '
                           f'M{cx + 5:.1f} {cy - 5:.1f} L{cx - 5:.1f} {cy + 5:.1f}" '
                           f'stroke="{col}" stroke-width="3"/>'
                           f'<text x="{cx:.1f}" y="{cy - 10:.1f}" text-anchor="middle" '
                           f'font-size="10" fill="{col}">{escape(p.outcome)}</text></g>')
    lx = _LEFT + pw
    for si, s in enumerate(reversed(list(series))):
        idx = len(series) - 1 - si
        label = escape(s.name)
        lx -= 14 + 7 * len(s.name) + 12
        out.append(f'<rect x="{lx:.1f}" y="8" width="12" height="12" '
                   f'fill="{series_colour(idx)}"/>'
                   f'<text x="{lx + 16:.1f}" y="18" font-size="11" class="legend">{label}</text>')
    if not values:
        out.append(f'<text x="{_LEFT + pw / 2:.1f}" y="{_TOP + ph / 2:.1f}" text-anchor="middle" '
                   f'font-size="13" fill="#777">no cell produced a value</text>')
    out.append("</svg>")
    return "\n".join(out)
