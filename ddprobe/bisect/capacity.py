"""What the oversize factors proved about a fixed-size buffer's capacity (pure: no I/O).

When a buffer that does not grow with the budget (grep-buffers: FLAG_FIXED) still overflows
enlarged x F at budget B (the oversize cell still fails the same way) and a larger factor
cures it, the buffer holds fewer than (B + 1) / F draft tokens' rows. A passing budget b needs
b + 1: where b + 1 >= (B + 1) / F it writes out of bounds too, unseen (on a GPU the overrun
lands in mapped memory). Such budgets leave the `ok` verdict for `buffer_sizing (latent,
inferred)`, with the arithmetic; the assumption is named: the use grows in proportion to the
draft tokens (rows of the tree mask). A budget memchecked (the latent check) is left to it.
"""
from __future__ import annotations

from collections.abc import Sequence

from ddprobe.bisect import advice
from ddprobe.bisect.cells import BAD, PlannedCell, same_failure
from ddprobe.bisect.planner import ModePlan, Planner
from ddprobe.bisect.static import Suspect
from ddprobe.results import Advice, Evidence, Verdict
from ddprobe.sources.buffers import FLAG_FIXED


def _bound(p: Planner, mp: ModePlan) -> tuple[Suspect, int, int, PlannedCell] | None:
    """(the fixed buffer, the budget, the largest factor that still failed, its cell)."""
    d = mp.ladder.decision
    if d is None or d.kind != "buffer_sizing" or d.workspace or len(d.buffers) != 1:
        return None
    sus = next((s for s in p.spec.suspects if s.attr == d.buffers[0]), None)
    if sus is None or FLAG_FIXED not in sus.flags:
        return None
    cfg = mp.ladder.config
    default = p.spec.options.oversize_factor
    failed = [(c.factor or default, c) for c in p.cells.values()
              if c.purpose == "oversize" and c.config == cfg and d.buffers[0] in c.buffers
              and p.obs(c).status == BAD and same_failure(p.obs(c).mode, mp.ladder.mode)]
    if not failed:
        return None
    f, cell = max(failed, key=lambda t: t[0])
    return sus, cfg.budget, f, cell


def infer(p: Planner, verdicts: list[Verdict], host: str | None) -> list[Verdict]:
    """The verdicts with the passing budgets the factors prove overflowing moved out of ok."""
    oks = [v for v in verdicts if v.kind == "ok"]
    if not oks:
        return verdicts
    found, taken = _overflowing(p, oks, host)
    if not taken:
        return verdicts
    return _moved_out(verdicts, oks, found, taken)


def _overflowing(p: Planner, oks: Sequence[Verdict],
                 host: str | None) -> tuple[list[Verdict], set[int]]:
    """(a verdict per mode whose factors prove passing budgets overflowing, those budgets);
    a budget memchecked is left to the latent check, one taken by a mode to it."""
    memchecked = {c.config.budget for c in p.cells.values() if c.purpose == "sanitize"}
    found: list[Verdict] = []
    taken: set[int] = set()
    for mp in p.state().modes:
        got = _bound(p, mp)
        if got is None:
            continue
        s, big, f, cell = got
        over = sorted(b for b in _ok_budgets(oks) if b + 1 >= (big + 1) / f
                      and b not in memchecked and b not in taken)
        if not over:
            continue
        taken.update(over)
        found.append(_verdict(s, big, f, cell, over, host))
    return found, taken


def _ok_budgets(oks: Sequence[Verdict]) -> list[int]:
    return [b for v in oks for b in v.budgets]


def _moved_out(verdicts: list[Verdict], oks: Sequence[Verdict], found: list[Verdict],
               taken: set[int]) -> list[Verdict]:
    """The verdicts with `taken` left out of the oks (an emptied ok dropped), the keep advice
    lowered to the largest tested budget left, and `found` after the leading ok."""
    for v in oks:
        v.budgets = [b for b in v.budgets if b not in taken]
    out = [v for v in verdicts if not (v.kind == "ok" and not v.budgets)]
    left = [b for v in out if v.kind == "ok" and v.tested for b in v.budgets]
    advice.lower_keep(out, taken, max(left) if left else None)
    at = 1 if out and out[0].kind == "ok" else 0
    return out[:at] + found + out[at:]


def _verdict(s: Suspect, big: int, f: int, cell: PlannedCell, over: Sequence[int],
             host: str | None) -> Verdict:
    cap = (big + 1) / f
    names = advice.names(over)
    text = (f"with {s.attr} x{f} b{big} still fails the same way: it holds fewer than "
            f"{big + 1}/{f} = {cap:.2f} draft tokens' rows (it does not grow with the budget); "
            f"{names} need{'s' if len(over) == 1 else ''} "
            + ", ".join(f"{b + 1}" for b in over)
            + f" >= {cap:.2f}: they pass but write past it (inferred, not measured; assumes "
              "its use grows in proportion to the draft tokens)")
    ev = [Evidence("oversize", text, [cell.base_key],
                   {"capacity": {"buffer": s.attr, "budget": big, "factor": f,
                                 "holds_fewer_than": round(cap, 3),
                                 "needs": {str(b): b + 1 for b in over}}})]
    return Verdict(kind="buffer_sizing", budgets=list(over), signature=None, outcome="ok",
                   confidence="medium", decided_by="oversize factors (inferred)", evidence=ev,
                   buffer={"attr": s.attr, "where": s.where, "named_by": "oversize factors"},
                   host=host, latent=True, inferred=True,
                   would_decide="a sanitize cell (compute-sanitizer memcheck) at "
                                f"{names}",
                   advice=Advice("latent", buffers=[s.attr], where=[s.where]))


__all__ = ["infer"]
