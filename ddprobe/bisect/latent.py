"""The latent-fault check: a passing graph budget is not proof (pure: no I/O).

On a real GPU an undersized graph buffer often does not crash: PyTorch's caching allocator
maps the memory past it, the overrun lands in a neighbour, and the cell passes (the H200 run of
issue 12: b16 "ok" while `write_tree_mask_kernel` made 474 out-of-bounds writes past
`cuda_graph_custom_mask`). So when there is reason to suspect one, each passing graph budget is
run again as a sanitize cell (compute-sanitizer memcheck, caching allocator off:
`ddprobe.cell.sanitize`).

When (`trigger`):
  * static: grep-buffers flags a captured buffer whose size does not follow the budget while
    its use does (every budget is suspect), or that is short of its use's layout at the
    context length (from the first budget where it is short);
  * dynamic: a higher budget fails with a memory-fault signature (illegal address, ...).
Which (`targets`): the passing graph budgets (tested, or assumed below a passing one) at and
above the first flagged budget, cheapest (smallest) first. A budget with invalid writes makes
the larger passing budgets latent too (the overrun grows with the budget): they are inferred,
not restarted, exactly as the frontier search infers between two failures.
What (`judge`): invalid writes attributed to a flagged buffer -> `buffer_sizing (latent)`;
invalid accesses that name no flagged buffer -> `inconclusive` (a memory error, cause not
measured); a clean report -> "memcheck clean" on the `ok`; a cell that could not run -> the
`ok` says so, with why.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from ddprobe.bisect import advice
from ddprobe.bisect.cells import BAD, GOOD, Obs, PlannedCell
from ddprobe.bisect.frontier import Row
from ddprobe.bisect.ladder import MEMORY_KINDS
from ddprobe.bisect.static import Suspect
from ddprobe.results import (
    Advice,
    CellResult,
    Config,
    Evidence,
    EvidenceDetails,
    EvidenceKind,
    Outcome,
    Verdict,
)
from ddprobe.sources.buffers import FLAG_FIXED, FLAG_SHORT

if TYPE_CHECKING:
    from typing_extensions import Unpack

LATENT_MODE: Final = "latent"  # the `mode` of latent-check cells (their purpose is sanitize)

# what each judgement means for the budget's verdict: invalid writes to a flagged buffer,
# invalid accesses naming none, a clean report, no report (the cell could not run)
LatentStatus = Literal["dirty", "foreign", "clean", "not_run"]
DIRTY: Final = "dirty"
FOREIGN: Final = "foreign"
CLEAN: Final = "clean"
NOT_RUN: Final = "not_run"


@dataclass(frozen=True)
class LatentOptions:
    enabled: bool = False  # --sanitize, or the host's facts show compute-sanitizer
    available: bool = False  # a sanitize cell can run on this host group
    note: str = ""  # why not, when enabled but unavailable, or why it is off


@dataclass(frozen=True)
class Trigger:
    first: int  # index into the budgets: the first flagged budget
    why: str  # one line, for the plan and the evidence


@dataclass(frozen=True)
class Judgement:
    budget: int
    status: LatentStatus
    text: str  # one line for the verdict
    cell: PlannedCell
    buffer: dict[str, Any] | None = None
    writes: int | None = None
    kernel: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def first_flagged(suspects: Sequence[Suspect], budgets: Sequence[int]) -> tuple[int, str] | None:
    """(index of the first budget a flagged buffer puts at risk, why) from grep-buffers."""
    best: tuple[int, str] | None = None
    for s in suspects:
        if s.tier != 1:
            continue
        if FLAG_FIXED in s.flags:
            cand = (0, f"grep-buffers: {s.attr} ({s.where}) does not grow with the budget "
                       "while its use does")
        elif FLAG_SHORT in s.flags:
            short = [z["budget"] for z in s.sizes if z.get("short_by")]
            idx = [i for i, b in enumerate(budgets) if b in short]
            if not idx:
                continue
            cand = (idx[0], f"grep-buffers: {s.attr} ({s.where}) is short of its use's layout "
                            f"at the context length from b{budgets[idx[0]]}")
        else:
            continue
        if best is None or cand[0] < best[0]:
            best = cand
    return best


def _memory_fault(o: Obs) -> bool:
    r = o.first
    return o.status == BAD and r is not None and r.outcome is Outcome.CRASH and \
        r.signature is not None and r.signature.kind in MEMORY_KINDS


def passing(row: Row) -> list[int]:
    """Indices of the passing graph budgets: tested good, or assumed good below one."""
    return sorted({i for i, o in enumerate(row.obs) if o.status == GOOD} | set(row.assumed_good))


def trigger(row: Row, suspects: Sequence[Suspect]) -> Trigger | None:
    b = row.budgets
    static = first_flagged(suspects, b)
    faults = [i for i, o in enumerate(row.obs) if _memory_fault(o)]
    goods = passing(row)
    if static is not None:
        return Trigger(static[0], static[1])
    if faults:
        r = row.obs[faults[0]].first
        assert r is not None and r.signature is not None
        below = [i for i in goods if i < faults[0]]
        if below:
            return Trigger(below[0], f"b{b[faults[0]]} fails with a memory fault "
                                     f"({r.signature.kind}) and grep-buffers flags no buffer")
    return None


def cell_for(base: Config, budget: int) -> PlannedCell:
    from dataclasses import replace
    return PlannedCell(replace(base, budget=budget, graph=True), "sanitize", LATENT_MODE)


def planned(row: Row, base: Config, suspects: Sequence[Suspect], opts: LatentOptions,
            obs: Callable[[PlannedCell], Obs]) -> list[PlannedCell]:
    """The latent-check cells due now (once the graph row is complete), cheapest first: the
    next untested target, none once a target showed invalid writes (the rest are inferred)."""
    if not (opts.enabled and opts.available) or not row.complete:
        return []
    t = trigger(row, suspects)
    if t is None:
        return []
    for i in targets(row, t):
        c = cell_for(base, row.budgets[i])
        o = obs(c)
        if not o.decided:
            return [c]
        if judge(c, o, suspects).status == DIRTY:
            return []
    return []


def targets(row: Row, t: Trigger) -> list[int]:
    return [i for i in passing(row) if i >= t.first]


def _writes(san: dict[str, Any]) -> tuple[int, str | None, int]:
    """(invalid writes, the kernel with most of them, invalid accesses of any kind)."""
    fs = [f for f in san.get("findings") or [] if isinstance(f, dict)]
    by_kernel: Counter[str] = Counter()
    for f in fs:
        if str(f.get("access", "")).startswith(("write", "atomic")):
            by_kernel[str(f.get("kernel"))] += int(f.get("count") or 1)
    printed = sum(int(f.get("count") or 1) for f in fs)
    total = san.get("error_count")
    writes = sum(by_kernel.values())
    if isinstance(total, int) and by_kernel and len(by_kernel) == 1 and writes == printed:
        writes = max(writes, total)  # every printed error is this kernel's write: trust the sum
    kernel = by_kernel.most_common(1)[0][0] if by_kernel else (
        str(fs[0].get("kernel")) if fs else None)
    return writes, kernel, max(printed, total if isinstance(total, int) else 0)


def judge(cell: PlannedCell, o: Obs, suspects: Sequence[Suspect]) -> Judgement:
    b = cell.config.budget
    r: CellResult | None = o.first
    if r is None:
        return Judgement(b, NOT_RUN, f"b{b}: the sanitize cell did not run", cell)
    san = r.sanitizer if isinstance(r.sanitizer, dict) else None
    if r.outcome in (Outcome.ERROR, Outcome.REFUSED) and not (san and san.get("findings")):
        return Judgement(b, NOT_RUN, f"b{b}: the memcheck cell could not run: "
                                     f"{r.error or r.outcome.value}", cell)
    if san is None or not san.get("ran"):
        return Judgement(b, NOT_RUN, f"b{b}: no compute-sanitizer report in the cell's log "
                                     "(did memcheck run?)", cell)
    if not san.get("findings") and not san.get("error_count"):
        return _no_findings(cell, r, san)
    return _findings_judgement(cell, r, san, suspects)


def _no_findings(cell: PlannedCell, r: CellResult, san: dict[str, Any]) -> Judgement:
    """memcheck reported nothing: clean if the server served under it."""
    b = cell.config.budget
    if r.outcome is Outcome.OK:
        how = ("ERROR SUMMARY: 0 errors" if san.get("error_count") == 0 else
               "no invalid access reported while it served; no ERROR SUMMARY, since the "
               "server was stopped, not exited")
        return Judgement(b, CLEAN, f"b{b}: memcheck clean (caching allocator off, one "
                                   f"request; {how})", cell)
    return Judgement(b, NOT_RUN, f"b{b}: memcheck reported no invalid access, but the "
                                 f"server did not serve under it ({r.outcome.value}"
                                 f"{': ' + r.signature.id if r.signature else ''})", cell)


def _findings_judgement(cell: PlannedCell, r: CellResult, san: dict[str, Any],
                        suspects: Sequence[Suspect]) -> Judgement:
    """Invalid accesses: dirty when they write past a flagged buffer, else foreign."""
    b = cell.config.budget
    writes, kernel, accesses = _writes(san)
    buf = r.buffer if isinstance(r.buffer, dict) else None
    flagged = {s.attr: s for s in suspects if s.tier == 1}
    how = str(r.buffer_match or "")
    if buf is not None and buf.get("attr") in flagged and writes:
        s = flagged[str(buf["attr"])]
        text = (f"passes, but writes past {s.attr} ({s.where}): {writes:,} invalid writes in "
                f"{kernel}")
        return Judgement(b, DIRTY, text, cell, buffer=buf, writes=writes, kernel=kernel,
                         details={"matched_by": how})
    named = f"; the nearest allocation names {buf['attr']}, not a flagged buffer" \
        if buf is not None and buf.get("attr") else (f"; {how}" if how else "")
    return Judgement(b, FOREIGN, f"b{b} passes, but memcheck reports {accesses:,} invalid "
                                 f"accesses ({writes:,} writes) in {kernel}{named}", cell,
                     buffer=buf, writes=writes, kernel=kernel)


def judgements(row: Row, base: Config, suspects: Sequence[Suspect],
               obs: Callable[[PlannedCell], Obs]) -> tuple[Trigger | None, list[Judgement],
                                                           list[int]]:
    """(trigger, a judgement per sanitize cell run, indices inferred latent above a dirty one)."""
    t = trigger(row, suspects)
    if t is None:
        return None, [], []
    out: list[Judgement] = []
    inferred: list[int] = []
    dirty = False
    for i in targets(row, t):
        if dirty:
            inferred.append(i)
            continue
        c = cell_for(base, row.budgets[i])
        o = obs(c)
        if not o.decided:
            continue
        j = judge(c, o, suspects)
        out.append(j)
        dirty = j.status == DIRTY
    return t, out, inferred


def _ev(kind: EvidenceKind, summary: str, cells: Sequence[PlannedCell] = (),
        **details: Unpack[EvidenceDetails]) -> Evidence:
    return Evidence(kind=kind, summary=summary, cells=[c.base_key for c in cells],
                    details=cast(EvidenceDetails, {k: v for k, v in details.items()
                                                  if v not in (None, [], {}, "")}))


def apply(verdicts: list[Verdict], row: Row, base: Config, suspects: Sequence[Suspect],
          opts: LatentOptions, obs: Callable[[PlannedCell], Obs],
          host: str | None = None) -> list[Verdict]:
    """The verdicts with the latent check's results folded in (the ok verdict loses the
    budgets found latent, gains "memcheck clean" or why the check could not run)."""
    t = trigger(row, suspects)
    if t is None or (not opts.enabled and not opts.note):
        return verdicts  # not triggered, or not asked about (e.g. a replayed session log)
    ok = next((v for v in verdicts if v.kind == "ok"), None)
    if not (opts.enabled and opts.available):
        if ok is not None:
            _note_unavailable(ok, row, t, opts)
        return verdicts
    _, js, inferred = judgements(row, base, suspects, obs)
    removed = {j.budget for j in js if j.status in (DIRTY, FOREIGN)} | \
        {row.budgets[i] for i in inferred}
    if ok is not None:
        _fold_into_ok(verdicts, ok, row, t, js, removed)
    out = _lowered(verdicts, ok, removed)
    at = 1 if out and out[0].kind == "ok" else 0  # latent verdicts come right after the ok
    return out[:at] + _found(js, inferred, row, t, suspects, obs, host) + out[at:]


def _lowered(verdicts: list[Verdict], ok: Verdict | None, removed: set[int]) -> list[Verdict]:
    """The verdicts but the emptied oks, the keep advice lowered below the `removed`
    budgets (to the largest clean one left)."""
    out = [v for v in verdicts if not (v.kind == "ok" and not v.budgets)]
    if removed:
        clean = ok.budgets if ok is not None else []
        advice.lower_keep(out, removed, max(clean) if clean else None)
    return out


def _found(js: Sequence[Judgement], inferred: Sequence[int], row: Row, t: Trigger,
           suspects: Sequence[Suspect], obs: Callable[[PlannedCell], Obs],
           host: str | None) -> list[Verdict]:
    """The latent check's own verdicts, by budget: one for the dirty budgets, one per
    foreign one."""
    dirty = [j for j in js if j.status == DIRTY]
    found: list[Verdict] = []
    if dirty:
        found.append(_dirty_verdict(dirty, inferred, row, t, suspects, obs, host))
    found += [_foreign_verdict(j, obs, host) for j in js if j.status == FOREIGN]
    found.sort(key=lambda v: v.budgets[0])
    return found


def _note_unavailable(ok: Verdict, row: Row, t: Trigger, opts: LatentOptions) -> None:
    """The check is off or cannot run: a passing budget it would check is less certain."""
    b = row.budgets
    if not any(x in ok.budgets for x in b[t.first:]):
        return
    state = "off" if not opts.enabled else "could not run"
    why = opts.note or "no compute-sanitizer on the host"
    ok.evidence.append(_ev("latent", f"latent check {state} ({why}): {t.why}, so a "
                           f"passing budget from b{b[t.first]} up may still write out "
                           "of bounds unseen; a sanitize cell (compute-sanitizer "
                           "memcheck) would decide",
                           latent="off" if not opts.enabled else NOT_RUN, why=why))
    ok.confidence = "medium" if ok.confidence == "high" else ok.confidence
    if ok.advice is not None and ok.advice.kind == "works":
        # never "works" while a latent write is possible and unchecked: say what decides it
        ok.advice.kind, ok.advice.at = "works_unchecked", b[t.first]
        ok.advice.decide = ("a sanitize cell (compute-sanitizer memcheck: `ddprobe bisect ... "
                            "--sanitize` on a host that has it) would decide")


def _fold_into_ok(verdicts: list[Verdict], ok: Verdict, row: Row, t: Trigger,
                  js: Sequence[Judgement], removed: set[int]) -> None:
    """The ok verdicts lose the budgets found latent and gain each clean/not-run judgement."""
    b = row.budgets
    oks = [v for v in verdicts if v.kind == "ok"]  # tested, then assumed (not restarted)
    for v in oks:
        v.budgets = [x for x in v.budgets if x not in removed]
    for j in js:
        if j.status in (CLEAN, NOT_RUN):
            home = next((v for v in oks if j.budget in v.budgets), ok)
            home.evidence.append(_ev("latent", j.text, [j.cell], latent=j.status,
                                     budget=j.budget))
    untested = [b[i] for i in targets(row, t) if b[i] not in removed
                and not any(j.budget == b[i] for j in js)]
    if untested:
        ok.evidence.append(_ev("latent", "memcheck not run at " + ", ".join(
            f"b{x}" for x in untested) + f" ({t.why})"))
    if any(j.status == NOT_RUN for j in js) and ok.confidence == "high":
        ok.confidence = "medium"


def _dirty_verdict(dirty: Sequence[Judgement], inferred: Sequence[int], row: Row, t: Trigger,
                   suspects: Sequence[Suspect], obs: Callable[[PlannedCell], Obs],
                   host: str | None) -> Verdict:
    """buffer_sizing (latent): the budgets that pass but write past a flagged buffer."""
    b = row.budgets
    j = dirty[0]
    ev = [_ev("latent", f"{t.why}; the passing graph budgets at and above "
                        f"b{b[t.first]} were re-run under compute-sanitizer memcheck "
                        "(PYTORCH_NO_CUDA_MEMORY_CACHING=1), smallest first")]
    ev += [_ev("memcheck", x.text, [x.cell], findings=_findings(x, obs)) for x in dirty]
    if inferred:
        ev.append(_ev("latent", ", ".join(f"b{b[i]}" for i in inferred) + " inferred "
                      "(above a budget with invalid writes; the overrun grows with the "
                      "budget), not restarted"))
    buf = dict(j.buffer or {})
    s = next((s for s in suspects if s.attr == buf.get("attr")), None)
    if s is not None:
        buf.setdefault("where", s.where)
    buf["named_by"] = "memcheck (" + str(j.details.get("matched_by") or "allocation") + ")"
    budgets = sorted({x.budget for x in dirty} | {b[i] for i in inferred})
    return Verdict(
        kind="buffer_sizing", budgets=budgets, signature="sanitizer_oob",
        outcome="ok", confidence="high", decided_by="memcheck (latent check)",
        evidence=ev, buffer=buf, host=host, latent=True,
        advice=Advice("latent", buffers=[str(buf.get("attr"))],
                      where=[str(buf.get("where", "?"))]))


def _foreign_verdict(j: Judgement, obs: Callable[[PlannedCell], Obs],
                     host: str | None) -> Verdict:
    """inconclusive (latent): invalid accesses not attributed to a flagged buffer."""
    return Verdict(
        kind="inconclusive", budgets=[j.budget], signature="sanitizer_oob", outcome="ok",
        confidence="low", decided_by="memcheck (latent check)", host=host, latent=True,
        evidence=[_ev("memcheck", j.text, [j.cell], findings=_findings(j, obs))],
        advice=Advice("latent_foreign"))


def _findings(j: Judgement, obs: Callable[[PlannedCell], Obs]) -> dict[str, Any] | None:
    r = obs(j.cell).first
    return r.sanitizer if r is not None else None


def plan_line(opts: LatentOptions, suspects: Sequence[Suspect], budgets: Sequence[int]) -> str:
    """The plan's line for the latent check (what it costs)."""
    if not opts.enabled:
        return ("     latent check off" + (f" ({opts.note})" if opts.note else "")
                + ": passing budgets are not memchecked")
    f = first_flagged(suspects, budgets)
    head = ("     latent check: the passing graph budgets "
            + (f"at and above b{budgets[f[0]]} ({f[1]})" if f else
               "below a memory-fault failure (if one occurs)")
            + " again under compute-sanitizer memcheck, smallest first, one restart each; "
              "above the first with invalid writes, inferred")
    if not opts.available:
        head += f" ({opts.note or 'no compute-sanitizer: it cannot run'})"
    return head


def max_cells(suspects: Sequence[Suspect], budgets: Sequence[int]) -> int:
    """At most this many latent-check cells (restarts) for these budgets."""
    f = first_flagged(suspects, budgets)
    return len(budgets) - (f[0] if f else 0) - (0 if f else 1)


__all__ = ["LATENT_MODE", "LatentOptions", "Judgement", "Trigger", "apply", "first_flagged",
           "judge", "judgements", "max_cells", "plan_line", "planned", "trigger"]
