"""Static evidence: which captured buffers are suspects for an undersized allocation (pure).

Input is grep-buffers' `BufferReport` (evaluated at the run's budgets and the host's max bs).
A suspect is a buffer allocated for CUDA-graph capture (phase init/capture) whose size does
not grow with the budget while an access to it does (FLAG_FIXED), or whose layout needs more
than is allocated at a budget (FLAG_SHORT). When the analysis flags nothing, the captured
buffers whose size ignores the draft tokens are the (weaker) fallback suspects.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ddprobe.sources.buffers import FLAG_FIXED, FLAG_NONE, FLAG_SHORT, BufferReport, BufferRow

_CAPTURED_PHASES = ("init", "capture")


@dataclass(frozen=True)
class Suspect:
    attr: str
    file: str
    line: int | None
    shape: str
    scope: str
    flags: tuple[str, ...]
    tier: int  # 1: flagged by the analysis; 2: fixed-size captured buffer (fallback)
    depends_on: tuple[str, ...] = ()
    growing_uses: tuple[str, ...] = ()
    sizes: tuple[dict[str, Any], ...] = ()  # per budget: budget, draft_tokens, bytes, short_by
    resolved: str | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["where"] = self.where
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Suspect:
        d = {k: v for k, v in d.items() if k != "where"}
        for k in ("flags", "depends_on", "growing_uses"):
            d[k] = tuple(d.get(k) or ())
        d["sizes"] = tuple(d.get("sizes") or ())
        return cls(**d)


def _sizes(r: BufferRow) -> tuple[dict[str, Any], ...]:
    return tuple({"budget": s.budget, "draft_tokens": s.draft_tokens, "elements": s.elements,
                  "bytes": s.bytes, "demand_elements": s.demand_elements,
                  "short_by": s.short_by, "missing": list(s.missing)} for s in r.sizes)


def _suspect(r: BufferRow, tier: int) -> Suspect:
    return Suspect(attr=r.attr, file=r.file, line=r.line, shape=r.shape, scope=r.scope,
                   flags=r.flags, tier=tier, depends_on=r.depends_on,
                   growing_uses=r.growing_uses, sizes=_sizes(r), resolved=r.resolved)


def _rank(r: BufferRow) -> tuple[int, int, str]:
    score = (FLAG_FIXED in r.flags) * 2 + (FLAG_SHORT in r.flags) * 2 + (FLAG_NONE in r.flags)
    return (-score, r.line or 0, r.attr)


def find_suspects(report: BufferReport | Sequence[BufferRow]) -> list[Suspect]:
    """Suspects in rank order (the most suspicious first), unique by attribute name."""
    rows = list(report.rows if isinstance(report, BufferReport) else report)
    captured = [r for r in rows if r.status == "found" and r.phase in _CAPTURED_PHASES
                and r.shape_span is not None]
    flagged = [r for r in captured if FLAG_FIXED in r.flags or FLAG_SHORT in r.flags]
    if flagged:
        chosen, tier = sorted(flagged, key=_rank), 1
    else:
        chosen = sorted((r for r in captured if not r.grows_with_budget), key=_rank)
        tier = 2
    out: list[Suspect] = []
    seen: set[str] = set()
    for r in chosen:
        if r.attr in seen:
            continue
        seen.add(r.attr)
        out.append(_suspect(r, tier))
    return out


def size_line(s: Suspect, budgets: Sequence[int] | None = None) -> str:
    """`b8: 1.1 MiB, b16: 1.1 MiB (short by 4,096)` for the evidence text."""
    parts = []
    for z in s.sizes:
        if budgets and z["budget"] not in budgets:
            continue
        n = z.get("bytes")
        txt = "?" if n is None else _fmt_bytes(n)
        if z.get("short_by"):
            txt += f" (short by {z['short_by']:,} elements)"
        parts.append(f"b{z['budget']}: {txt}")
    return ", ".join(parts)


def _fmt_bytes(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} B"
