"""Where a cell's time went: start, weight load, capture, health, probes, stop (pure).

The weight load and the CUDA-graph capture are read from the server's own log lines where it
prints them, in the wordings of the real SGLang releases (0.4.x to 0.5.23):

    Load weight begin. avail mem=... GB                                   (every release)
    Load weight end. type=..., dtype=..., avail mem=... GB, mem usage=... GB.   (<= 0.5.2)
    Load weight end. elapsed=12.34 s, type=..., ...                       (0.5.10 .. 0.5.23)
    Load weight end. Committed real weights after CUDA graph capture in 3.21 s (...)  (0.5.23)
    Capture cuda graph begin. This can take up to several minutes. avail mem=... GB
    Capture cuda graph end. Time elapsed: 41.20 s. mem usage=... GB. ...  (0.4.x .. 0.5.11;
        also `Capture draft cuda graph end`, `Capture draft extend cuda graph end`,
        `Capture piecewise CUDA graph end`, `Capture cpu graph end`)
    Capture target verify CUDA graph end. bs=[1, 2, 4], elapsed=8.10 s, ...      (0.5.23)

A `Load weight end` without `elapsed=` is timed by the two lines' timestamps (`[2026-12-01
10:37:43 TP0] `, one-second resolution). Only the lines of the first rank that logs a weight
load are counted (every TP rank logs its own), and the target's and the draft's loads and
captures add up. Everything else is ddprobe's own clock: `start` is the launch command,
`health` the rest of the health wait (start-up outside load and capture, the warm-up, the
health polls), `probes` the probe run, `stop` stopping the previous server plus the cell's own
when it had to be stopped.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

PHASES: Final = ("start", "load", "capture", "health", "probes", "stop")

_PREFIX: Final = re.compile(
    r"^\[(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)(?:[.,]\d+)?(?P<rank>[^\]]*)\]\s*")
_LOAD_BEGIN: Final = re.compile(r"\bLoad weight begin\b")
_LOAD_END: Final = re.compile(
    r"\bLoad weight end\.\s*(?:elapsed=(?P<el>\d+(?:\.\d+)?) s"
    r"|Committed real weights after CUDA graph capture in (?P<commit>\d+(?:\.\d+)?) s)?")
_CAPTURE_END: Final = re.compile(
    r"\bCapture [\w ]*?graph end\.\s*(?:Time elapsed: (?P<te>\d+(?:\.\d+)?) s"
    r"|.*?\belapsed=(?P<el>\d+(?:\.\d+)?) s)", re.IGNORECASE)
_CAPTURE_BEGIN: Final = re.compile(r"\bCapture [\w ]*?graph begin\b", re.IGNORECASE)


@dataclass(frozen=True)
class LogPhases:
    """The weight load and graph capture seconds a server log states (None: not stated)."""

    load_s: float | None = None
    capture_s: float | None = None
    load_from: str = ""  # "elapsed" (the line says it) | "timestamps" | ""
    capture_from: str = ""


def _stamp(ts: str) -> float | None:
    try:
        return datetime.fromisoformat(ts.replace("T", " ")).timestamp()
    except ValueError:
        return None


def _add(total: float, source: str, elapsed: str | None, begin: float | None,
         end: float | None) -> tuple[float, str]:
    """One phase's seconds added: the elapsed time its end line states, else the time between
    its begin and end lines' stamps; the source is the first one that counted."""
    if elapsed is not None:
        return total + float(elapsed), source or "elapsed"
    if begin is not None and end is not None:
        return total + max(0.0, end - begin), source or "timestamps"
    return total, source


def log_phases(text: str) -> LogPhases:
    """The weight load and capture times the log's own lines state (see the module doc)."""
    rank: str | None = None
    load = cap = 0.0
    load_from = cap_from = ""
    begin_ts: float | None = None
    cap_begin_ts: float | None = None
    for line in text.splitlines():
        m = _PREFIX.match(line)
        body = line[m.end():] if m else line
        this_rank = m.group("rank").strip() if m else ""
        ts = _stamp(m.group("ts")) if m else None
        if _LOAD_BEGIN.search(body):
            if rank is None:
                rank = this_rank
            if this_rank == rank:
                begin_ts = ts
            continue
        if rank is None or this_rank != rank:
            continue
        e = _LOAD_END.search(body)
        if e is not None:
            load, load_from = _add(load, load_from, e.group("el") or e.group("commit"),
                                   begin_ts, ts)
            begin_ts = None
            continue
        if _CAPTURE_BEGIN.search(body):
            cap_begin_ts = ts
            continue
        c = _CAPTURE_END.search(body)
        if c is not None:
            cap, cap_from = _add(cap, cap_from, c.group("te") or c.group("el"),
                                 cap_begin_ts, ts)
            cap_begin_ts = None
    return LogPhases(load if load_from else None, cap if cap_from else None, load_from,
                     cap_from)


@dataclass(frozen=True)
class CellPhases:
    """Seconds per phase of one cell, and which came from the server's log."""

    seconds: Mapping[str, float]
    from_log: tuple[str, ...] = ()

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def to_dict(self) -> dict[str, Any]:
        return {**{k: round(v, 3) for k, v in self.seconds.items()},
                "from_log": list(self.from_log)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> CellPhases | None:
        if not isinstance(d, Mapping):
            return None
        secs = {k: float(d[k]) for k in PHASES if isinstance(d.get(k), (int, float))}
        return cls(secs, tuple(str(x) for x in d.get("from_log") or ()))


def cell_phases(timings: Mapping[str, float], log: str) -> CellPhases:
    """A cell's phases from its timings (ddprobe's clock) and its server log."""
    lp = log_phases(log) if log else LogPhases()
    health = float(timings.get("health", 0.0))
    secs: dict[str, float] = {"start": float(timings.get("start", 0.0))}
    from_log: list[str] = []
    left = health
    for name, val in (("load", lp.load_s), ("capture", lp.capture_s)):
        if val is not None:
            v = min(val, left) if "health" in timings else val
            secs[name] = v
            left -= v
            from_log.append(name)
    secs["health"] = max(0.0, left)
    secs["probes"] = float(timings.get("probe", 0.0)) + float(timings.get("server_info", 0.0))
    secs["stop"] = float(timings.get("stop", 0.0)) + float(timings.get("cleanup", 0.0))
    return CellPhases({k: secs.get(k, 0.0) for k in PHASES}, tuple(from_log))
