"""Static evidence: which captured buffers are suspects for an undersized allocation (pure).

Input is grep-buffers' `BufferReport` (evaluated at the run's budgets and the host's max bs).
A suspect is a buffer allocated for CUDA-graph capture (phase init/capture) whose size does
not grow with the budget while an access to it does (FLAG_FIXED), or whose layout needs more
than is allocated at a budget (FLAG_SHORT). When the analysis flags nothing, the captured
buffers whose size ignores the draft tokens are the (weaker) fallback suspects.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ddprobe.cell.classify import CHAINED
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
    uses: tuple[str, ...] = ()  # every access grep-buffers found: "file:line func: statement"
    ranked_by: str = ""  # why it is where it is in the order (the crash's traceback)

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
        for k in ("flags", "depends_on", "growing_uses", "uses"):
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
                   growing_uses=r.growing_uses, sizes=_sizes(r), resolved=r.resolved,
                   uses=r.uses)


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


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[A-Za-z_]\w*)')


def traceback_frames(lines: Sequence[str]) -> list[tuple[str, int, str]]:
    """(file, line, function) of the last traceback in a log excerpt, innermost first. A
    chained traceback (an exception raised while handling another, as 0.5.11 re-raises a
    capture failure as `Capture cuda graph failed: ...`) is read from the first exception of
    the chain: its innermost frame is where it failed, then the frames of the later ones."""
    chain: list[list[tuple[str, int, str]]] = []
    frames: list[tuple[str, int, str]] = []
    chained = False
    for ln in lines:
        if ln.strip() == "...":  # a ddprobe excerpt's cut: what follows is a later part
            chain, frames, chained = ([*chain, frames] if frames else chain), [], True
        elif any(c in ln for c in CHAINED):
            chained = True
        elif "Traceback (most recent call last)" in ln:
            chain = [*chain, frames] if chained and frames else []
            frames, chained = [], False
        m = _FRAME.search(ln)
        if m:
            frames.append((m["file"], int(m["line"]), m["func"]))
    return [f for seg in (*chain, frames) for f in seg[::-1]]


def rank_by_traceback(suspects: Sequence[Suspect], log_lines: Sequence[str]
                      ) -> list[Suspect]:
    """The suspects with those the crash's traceback names first: the frame nearest the
    innermost that is a use of the buffer (a call `f(..., self.attr, ...)` where the frame is
    in `f`, or the frame is the function holding the use) ranks its buffer. The order is
    otherwise kept; a ranked suspect says which frame ranked it (`ranked_by`)."""
    frames = traceback_frames(log_lines)
    if not frames or not suspects:
        return list(suspects)
    scored: list[tuple[int, int, Suspect]] = []
    for i, s in enumerate(suspects):
        hit = _frame_hit(s, frames)
        if hit is None:
            scored.append((len(frames), i, s))
            continue
        depth, why = hit
        scored.append((depth, i, replace(s, ranked_by=why)))
    return [s for _, _, s in sorted(scored, key=lambda t: (t[0], t[1]))]


def _frame_hit(s: Suspect, frames: Sequence[tuple[str, int, str]]) -> tuple[int, str] | None:
    for depth, (file, line, func) in enumerate(frames):
        where = f"{file.rsplit('/', 1)[-1]}:{line} {func}"
        for use in (*s.uses, *s.growing_uses):
            head, _, stmt = use.partition(": ")
            loc, _, use_func = head.partition(" ")
            if re.search(rf"\b{re.escape(func)}\(", stmt) and s.attr.split(".")[0] in stmt:
                return depth, (f"the crash's traceback: frame {depth} from the innermost "
                               f"({where}) is called with it at {loc}")
            if use_func == func and file.endswith(loc.rsplit(":", 1)[0]):
                return depth, (f"the crash's traceback: frame {depth} from the innermost "
                               f"({where}) uses it at {loc}")
    return None


def evidence_backend(requested: str | None, effective: str | None, server_args: Sequence[str],
                     configured: str | None) -> tuple[str, str]:
    """(the backend whose buffers are the static evidence, why): the one the cells run. An
    explicit --backend; else the backend the preflight says the server resolves for these
    launches; else the host's --attention-backend in server.args, or its server.backend; only
    with none of these every backend's files ("all"), said so."""
    if requested:
        return requested, f"--backend {requested}"
    if effective:
        return effective, f"the preflight: the server runs --attention-backend {effective}"
    given = _arg_value(server_args, "--attention-backend")
    if given:
        return given, f"the host's server.args: --attention-backend {given} (assumed: the " \
                      f"preflight did not say)"
    if configured:
        return configured, f"the host's server.backend: {configured} (assumed: the preflight " \
                           f"did not say)"
    return "all", ("no backend given or configured and the preflight did not say which the "
                   "server runs: the buffers of triton, flashinfer and fa3 are all read; give "
                   "--backend or server.backend to read only the one the cells run")


def _arg_value(argv: Sequence[str], flag: str) -> str | None:
    for i, w in enumerate(argv):
        if w == flag and i + 1 < len(argv):
            return argv[i + 1]
        if w.startswith(flag + "="):
            return w.split("=", 1)[1]
    return None


def cleared(report: BufferReport | None) -> list[str]:
    """The captured buffers that are not suspects because their size was compared with their
    use's layout and holds it at every budget: one line each, with both numbers (at the
    largest budget) and the seq_len the layout was evaluated at."""
    if report is None:
        return []
    out: list[str] = []
    for r in report.rows:
        if r.status != "found" or not r.demand or r.phase not in _CAPTURED_PHASES or not r.sizes:
            continue
        if any(z.short_by or z.demand_elements is None or z.elements is None for z in r.sizes):
            continue
        z = r.sizes[-1]
        out.append(f"{r.attr} ({r.file}:{r.line}): its use's layout needs {z.demand_elements:,} "
                   f"elements at seq_len {z.seq_len} for b{z.budget}, {z.elements:,} allocated"
                   f" (holds at every budget)")
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
