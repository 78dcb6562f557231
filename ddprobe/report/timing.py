"""Where a run's time went, per cell and phase (start, load, capture, health, probes, stop),
from the phases each cell recorded (`cell.phases`); a cell of an older journal has none."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from ddprobe.results import CellResult
from ddprobe.untrusted import md_code

PHASES: Final = ("start", "load", "capture", "health", "probes", "stop")


def cell_phases(c: CellResult) -> dict[str, float] | None:
    d = c.phases
    if not isinstance(d, dict):
        return None
    return {k: float(d[k]) for k in PHASES if isinstance(d.get(k), (int, float))}


def totals(cells: Sequence[CellResult]) -> dict[str, float]:
    out = dict.fromkeys(PHASES, 0.0)
    for c in cells:
        for k, v in (cell_phases(c) or {}).items():
            out[k] += v
    return out


def summary_line(cells: Sequence[CellResult]) -> str:
    """One line: the seconds per phase over the cells, and how many ran cheap."""
    timed = [c for c in cells if cell_phases(c) is not None]
    if not timed:
        return ""
    t = totals(timed)
    cheap = sum(1 for c in timed if c.cheap)
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in t.items() if v >= 0.05)
    return (f"time per phase over {len(timed)} cell(s){f' ({cheap} cheap)' if cheap else ''}: "
            f"{parts}; total {sum(t.values()):.1f} s")


def markdown_rows(cells: Sequence[tuple[int, CellResult]]) -> list[str]:
    """The markdown table: one row per cell with phases, and the totals."""
    timed = [(i, c) for i, c in cells if cell_phases(c) is not None]
    if not timed:
        return []
    head = "| # | cell | cheap | " + " | ".join(PHASES) + " | total |"
    out = ["## Where the time went", "",
           "Seconds per phase; load and capture from the server's own log lines where it "
           "prints them, the rest from ddprobe's clock.", "", head,
           "| ---: | --- | --- | " + " | ".join("---:" for _ in PHASES) + " | ---: |"]
    for i, c in timed:
        ph = cell_phases(c) or {}
        key = str((c.plan or {}).get("key") or c.config.key)
        out.append(f"| {i} | {md_code(key)} | {'yes' if c.cheap else ''} | "
                   + " | ".join(f"{ph.get(k, 0.0):.1f}" for k in PHASES)
                   + f" | {sum(ph.values()):.1f} |")
    t = totals([c for _, c in timed])
    out.append("| | **total** | | " + " | ".join(f"{t[k]:.1f}" for k in PHASES)
               + f" | {sum(t.values()):.1f} |")
    return out + [""]


def csv_columns(c: CellResult) -> dict[str, Any]:
    ph = cell_phases(c) or {}
    return {**{f"{k}_phase_s": ph.get(k) for k in PHASES}, "cheap": bool(c.cheap)}

