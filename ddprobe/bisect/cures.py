"""What each cure leaves, as verdicts (bisect/residual.py decides; this writes them).

A budget whose crash a cure avoids and whose cured cell shows another failure carries two
verdicts: the cure's (buffer_sizing) and the second defect's (kernel, graph_capture, or
inconclusive with what would decide it). The mode's other budgets, cured by their own
control, are assumed to carry it too (low confidence, not tested).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import cast

from ddprobe.bisect import advice, agreement
from ddprobe.bisect.cells import describe
from ddprobe.bisect.ladder import Decision
from ddprobe.bisect.planner import ModePlan, Planner
from ddprobe.bisect.residual import Residual, evidence_lines
from ddprobe.results import Advice, AdviceKind, Evidence, EvidenceDetails, Verdict


def apply(p: Planner, verdicts: list[Verdict], host: str | None) -> list[Verdict]:
    """The verdicts with each second defect added (and named in the cure's own verdict)."""
    st = p.state()
    out = list(verdicts)
    for r in st.residuals:
        mp = next((m for m in st.modes if m.ladder.mode == r.parent), None)
        if mp is None:
            continue
        if r.decision is None:
            out = [_noted(v, r, "; ".join(r.notes)) if r.budget in v.budgets and
                   v.kind == "buffer_sizing" and r.notes else v for v in out]
            continue
        d = r.decision
        out = [_noted(v, r, f"once cured, b{r.budget} fails another way: a second verdict "
                            f"({d.kind}) follows") if r.budget in v.budgets and
               v.kind == "buffer_sizing" else v for v in out]
        out.append(_verdict(p, r, d, host))
        others = _others(p, mp)
        if others:
            out.append(_assumed(p, r, d, others, host))
    return out


def _noted(v: Verdict, r: Residual, text: str) -> Verdict:
    return replace(v, evidence=[*v.evidence, Evidence("residual", text, [r.cure.base_key])])


def _others(p: Planner, mp: ModePlan) -> list[int]:
    b = p.spec.budgets
    return sorted(b[i] for i in {*mp.covered, *mp.assumed, *mp.uncontrolled} if i != mp.first)


def _advice_kind(r: Residual, d: Decision) -> AdviceKind:
    if d.kind == "graph_capture":
        return "diverged" if r.mode == agreement.DIVERGENCE else "graph_capture"
    if d.kind == "kernel":
        return "kernel"
    if d.reason in ("nondeterministic", "not-decisive"):
        return "nondeterministic"
    return "inconclusive"


def _verdict(p: Planner, r: Residual, d: Decision, host: str | None) -> Verdict:
    row = p.state().row
    keep = row.last_good_below_frontier
    co = p.obs(r.cure).first
    ev = [Evidence("residual", s, cells, cast(EvidenceDetails, details)) for s, cells, details
          in evidence_lines(r, p.obs, describe, p.spec.options.oversize_factor,
                                p.spec.options.agreement)]
    ev += [Evidence("note", n) for n in (*r.notes, *d.notes)]
    b = p.spec.budgets
    a = Advice(_advice_kind(r, d), at=r.like or r.budget,
               keep=b[keep] if keep is not None else None,
               decide=d.would_decide or "re-run with --repeat 3",
               command=advice.next_command(d, host, r.budget, b,
                                           p.spec.options.oversize_factor))
    divergence = r.mode == agreement.DIVERGENCE
    return Verdict(kind=d.kind, budgets=[r.budget],
                   signature=co.signature.id if co and co.signature and not divergence
                   else None,
                   outcome="garbage" if divergence else co.outcome.value if co else "?",
                   confidence=d.confidence, decided_by=d.decided_by, evidence=ev, host=host,
                   would_decide=d.would_decide, reason=d.reason, advice=a)


def _assumed(p: Planner, r: Residual, d: Decision, others: Sequence[int],
             host: str | None) -> Verdict:
    names = ", ".join(f"b{x}" for x in others)
    ev = [Evidence("assumed", f"{names}: the cure avoids the failure there too; assumed to "
                   f"carry b{r.budget}'s second defect ({d.kind}) as well (not tested: the "
                   "cure was not run there with real weights)")]
    return Verdict(kind=d.kind, budgets=list(others), signature=None,
                   outcome="garbage" if r.mode == agreement.DIVERGENCE else "?",
                   confidence="low", decided_by="assumed (not tested)", evidence=ev,
                   host=host, tested=False, reason="assumed",
                   would_decide=f"a bisect from {names} alone (its cure, then what it leaves)",
                   advice=Advice("assumed", budgets=list(others),
                                 command=advice.bisect_cmd(host, "--budgets",
                                                           ",".join(map(str, others)))))


__all__ = ["apply"]
