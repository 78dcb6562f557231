"""Verdicts with their evidence, from the planner's state (pure).

One verdict per failure mode (buffer_sizing, graph_capture, kernel, inconclusive), plus `ok`
when nothing fails, `flaky` for cells whose repeats disagree and `config_error` for refused
flags. Each names the evidence that decided it, the cells it rests on, the log line, the
buffer with file:line and evaluated sizes, and the next step.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from ddprobe.bisect import advice, agreement, capacity, cures, latent
from ddprobe.bisect.cells import BAD, FLAKY, GOOD, REFUSED, SKIP, Obs, PlannedCell, Status, describe
from ddprobe.bisect.ladder import Decision, LadderState
from ddprobe.bisect.planner import ModePlan, Planner
from ddprobe.bisect.served import served_max_bs
from ddprobe.bisect.static import Suspect, rank_by_traceback, size_line
from ddprobe.exitcodes import ExitCode
from ddprobe.probes import differential
from ddprobe.results import (
    Advice,
    CellResult,
    Confidence,
    Evidence,
    EvidenceDetails,
    EvidenceKind,
    Verdict,
    VerdictKind,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

FAILURE_KINDS: Final[tuple[VerdictKind, ...]] = ("buffer_sizing", "graph_capture", "kernel")
# what a run found, as `git bisect run` sees a version (the end entry's status, RunModel.status)
RunStatus = Literal["good", "bad", "skip"]
ExitProtocol = Literal["bisect"]  # --exit-protocol: the exit codes `git bisect run` reads


def _ev(kind: EvidenceKind, summary: str, cells: Sequence[PlannedCell | str] = (),
        **details: Unpack[EvidenceDetails]) -> Evidence:
    keys = [c if isinstance(c, str) else c.base_key for c in cells]
    return Evidence(kind=kind, summary=summary, cells=keys,
                    details=cast(EvidenceDetails, {k: v for k, v in details.items()
                                                  if v not in (None, [], {}, "")}))


def _frontier_evidence(p: Planner, idx: list[int]) -> list[Evidence]:
    """Where the mode's frontier lies, its signature at each failing budget, and budgets that
    pass again above it."""
    out = [*_below_evidence(p, idx[0]), _signature_evidence(p, idx)]
    row = p.state().row
    b = row.budgets
    above = [i for i in range(idx[0] + 1, len(b)) if row.obs[i].status == GOOD]
    if above:
        out.append(_ev("frontier", "not a single threshold: "
                       + ", ".join(f"b{b[i]}" for i in above) + " passes again above it",
                       [p.frontier_cell(b[i]) for i in above]))
    return out


def _below_evidence(p: Planner, first: int) -> list[Evidence]:
    """The last budget that passes below the first failing one (or why there is none)."""
    row = p.state().row
    b = row.budgets
    fc = p.frontier_cell(b[first])
    goods = [i for i in range(first) if row.obs[i].status == GOOD]
    if not goods:
        if first == 0:
            return [_ev("frontier", f"the smallest budget given, b{b[0]}, already fails: "
                        "inconclusive for a threshold (add a smaller budget to find one)",
                        [fc])]
        return [_ev("frontier", f"no budget below b{b[first]} could be tested "
                    f"({', '.join(f'b{b[i]} {row.obs[i].status}' for i in range(first))})")]
    g = goods[-1]
    out = [_ev("frontier", f"b{b[g]} passes with CUDA graphs "
               f"({describe(row.obs[g].first)}); "
               f"b{b[first]} fails ({describe(row.obs[first].first)})",
               [p.frontier_cell(b[g]), fc])]
    amb = [i for i in range(g + 1, first) if not row.obs[i].usable]
    if amb:
        out.append(_ev("frontier", "the first failing budget is one of "
                       + ", ".join(f"b{b[i]}" for i in [*amb, first])
                       + f" ({', '.join(f'b{b[i]} {row.obs[i].status}' for i in amb)})"))
    return out


def _signature_evidence(p: Planner, idx: list[int]) -> Evidence:
    """The mode's signature, the budgets it was seen at and those inferred between them."""
    row = p.state().row
    b = row.budgets
    tested = [i for i in idx if row.obs[i].status == BAD]
    inferred = [i for i in idx if row.obs[i].status != BAD]
    res = row.obs[idx[0]].first
    if res is None:
        return _ev("signature", _seen_at("outcome ?", b, tested, inferred),
                   [p.frontier_cell(b[i]) for i in tested])
    sig = res.signature
    return _ev("signature", _seen_at(sig.id if sig else f"outcome {res.outcome.value}", b,
                                     tested, inferred),
               [p.frontier_cell(b[i]) for i in tested],
               line=sig.line if sig else None, log=list(res.log_excerpt[-12:]),
               log_path=res.log_path, phase=res.phase)


def _seen_at(what: str, b: Sequence[int], tested: Sequence[int],
             inferred: Sequence[int]) -> str:
    text = what + " at " + ", ".join(f"b{b[i]}" for i in tested)
    if inferred:
        text += "; " + ", ".join(f"b{b[i]}" for i in inferred) + \
            " inferred (between two failures of this mode, not restarted)"
    return text


def _suspect_details(s: Suspect, budgets: Sequence[int]) -> dict[str, Any]:
    return {"attr": s.attr, "file": s.file, "line": s.line, "where": s.where, "expr": s.shape,
            "resolved": s.resolved, "flags": list(s.flags), "tier": s.tier,
            "growing_uses": list(s.growing_uses), "sizes": list(s.sizes),
            "sizes_text": size_line(s, budgets)}


def _static_evidence(p: Planner, lad: LadderState, budgets: Sequence[int]) -> Evidence:
    crash = p.obs(p.frontier_cell(lad.config.budget)).first
    sus = rank_by_traceback(p.spec.suspects, crash.log_excerpt if crash else ())
    if not sus:
        return _ev("static", "grep-buffers found no captured buffer to suspect (no oversize "
                   "experiment possible)")
    shown = [s for s in sus if s.attr in lad.naming] if lad.naming else list(sus)
    parts = []
    for s in shown[:4]:
        if s.shape == "?" and not s.sizes:  # a suspect named by hand (manual mode, replay)
            parts.append(f"{s.attr} ({s.where}): named as a suspect (--suspect), its "
                         "allocation not analysed in this session")
            continue
        use = s.growing_uses[0].split(": ", 1)[0] if s.growing_uses else ""
        why = (" does not grow with the budget while its use at " + use + " does"
               if s.tier == 1 and use else
               " is flagged by the analysis" if s.tier == 1 else
               " is captured and fixed-size (fallback suspect)")
        sizes = size_line(s, budgets)
        if "?" in sizes and s.resolved:
            sizes = f"size = {s.resolved}"
        else:
            sizes = f"sizes {sizes}"
        ranked = f"; ranked first by {s.ranked_by}" if s.ranked_by else ""
        parts.append(f"{s.attr} ({s.where}, `{s.shape}`){why}; {sizes}{ranked}")
    more = f" (+{len(shown) - 4} more)" if len(shown) > 4 else ""
    return _ev("static", "grep-buffers: " + "; ".join(parts) + more,
               buffers=[_suspect_details(s, budgets) for s in shown])


def _cell_evidence(p: Planner, lad: LadderState, mode_budget: int,
                   sig_mode: str) -> list[Evidence]:
    out: list[Evidence] = []
    row = p.state().row
    known = {m: row.budgets[idx[0]] for m, idx in row.modes().items()}
    factor = p.spec.options.oversize_factor
    e = lad.cells.get("E")
    if e is not None and p.obs(e).decided:
        o = p.obs(e)
        txt = {GOOD: f"b{mode_budget} without CUDA graphs passes ({describe(o.first)}): the "
                     "failure needs CUDA graphs",
               BAD: f"b{mode_budget} fails without CUDA graphs too ({describe(o.first)})"
               }.get(o.status, f"eager control: {o.status} ({describe(o.first)})")
        out.append(_ev("eager", txt, [e]))
        g = p.obs(p.frontier_cell(mode_budget)).first
        d = differential.evidence(g, o.first)
        if d is not None:
            out.append(_ev("differential", d.summary, [p.frontier_cell(mode_budget), e],
                           differential=d.to_dict()))
    ovs = [c for c in p.planned().values() if c.purpose == "oversize" and c.config == lad.config]
    for c in sorted(ovs, key=lambda c: (c.factor or factor, -len(c.buffers))):
        o = p.obs(c)
        if not o.decided:
            continue
        what = ", ".join(c.buffers)
        verb = _verb(o, sig_mode, "passes", "still fails", known)
        out.append(_ev("oversize", f"with {what} x{c.factor or factor} (temporary patch, "
                       "reverted) "
                       f"b{mode_budget} {verb} ({describe(o.first)})", [c],
                       buffers=list(c.buffers), patches=list(o.first.patches) if o.first else None))
    for step in ("M", "M2"):
        m = lad.cells.get(step)
        if m is not None and p.obs(m).decided:
            out.append(_max_bs_evidence(p, m, mode_budget, sig_mode, known))
    return out


def _max_bs_evidence(p: Planner, m: PlannedCell, mode_budget: int, sig_mode: str,
                     known: dict[str, int]) -> Evidence:
    o = p.obs(m)
    bs = m.config.max_bs
    ran = served_max_bs(o.first)
    failed_at = served_max_bs(p.obs(p.frontier_cell(mode_budget)).first)
    if ran is not None and failed_at is not None and ran >= failed_at:
        txt = (f"b{mode_budget} with --cuda-graph-max-bs {bs}: the server still captured "
               f"max bs {ran}, as in the failing cell: the same config, no evidence")
    elif o.status == GOOD or (o.status == BAD and o.mode != sig_mode):
        txt = (f"b{mode_budget} with --cuda-graph-max-bs {bs} "
               f"{_verb(o, sig_mode, 'passes', 'still fails', known)} "
               f"({describe(o.first)}): "
               "the failure scales with max bs x draft tokens: a fixed-capacity workspace")
    elif o.status == BAD:
        txt = (f"b{mode_budget} with --cuda-graph-max-bs {bs} still fails "
               f"({describe(o.first)}): " + ("a workspace too small for one request's tree "
                                             "is not ruled out" if bs == 1 else
                                             "a workspace is not ruled out until max bs 1"))
    else:
        txt = f"max-bs experiment: {o.status} ({describe(o.first)})"
    return _ev("max_bs", txt, [m])


def _verb(o: Obs, mode: str, good: str, bad: str, known: dict[str, int]) -> str:
    if o.status == GOOD:
        return "avoids this crash" if o.first is not None and o.first.cheap else good
    if o.status == BAD and o.mode != mode:
        like = f"like b{known[o.mode]}" if o.mode in known else "differently"
        return f"avoids this failure (then fails {like}, another failure mode)"
    if o.status == BAD:
        return bad
    return o.status


def _verdict_base(p: Planner, mp: ModePlan, idx: list[int]) -> tuple[Decision, list[Evidence]]:
    lad = mp.ladder
    row = p.state().row
    b = row.budgets
    first = mp.first
    d: Decision = lad.decision or Decision(
        "inconclusive", "none", "low", notes=("the diagnosis did not finish",),
        reason="unfinished", would_decide="resume the run (`ddprobe bisect --resume RUN_ID`)")
    sig_mode = row.obs[first].mode or lad.mode
    ev = _frontier_evidence(p, [first, *[i for i in idx if i != first]])
    cell_ev = _cell_evidence(p, lad, b[first], sig_mode)
    ev += [e for e in cell_ev if e.kind == "eager"]
    oversize_ran = any(c.purpose == "oversize" and c.config == lad.config and p.obs(c).decided
                       for c in p.planned().values())
    if oversize_ran or d.kind in ("graph_capture", "inconclusive") or (
            d.kind == "buffer_sizing" and not d.workspace):
        ev.append(_static_evidence(p, lad, b))
    ev += [e for e in cell_ev if e.kind != "eager"]
    ev += _control_evidence(p, mp, sig_mode)
    ev += _extra_evidence(p, lad)
    for n in (*lad.notes, *d.notes):
        ev.append(_ev("note", n))
    return d, ev


def _control_evidence(p: Planner, mp: ModePlan, sig_mode: str) -> list[Evidence]:
    """Each other budget of the mode: its own control, or why it has none."""
    b = p.spec.budgets
    out: list[Evidence] = []
    first = b[mp.first]
    for i, cc in sorted(mp.controls.items()):
        o = p.obs(cc)
        if i in mp.covered:
            what = {"eager": "without CUDA graphs", "oversize": "with the enlarged buffer",
                    "max_bs": f"with --cuda-graph-max-bs {cc.config.max_bs}"}[cc.purpose]
            out.append(_ev("control", f"b{b[i]}'s own control: {what} it "
                           f"{_verb(o, '', 'passes', 'fails', {})} "
                           f"({describe(o.first)}), as at b{first}", [cc]))
    for i in mp.uncontrolled:
        out.append(_ev("control", f"b{b[i]}: its own control did not run "
                       f"({p.obs(mp.controls[i]).status}); its verdict rests on b{first}'s "
                       "evidence (confidence lowered)", [mp.controls[i]]))
    return out


_LOWER: Final[dict[Confidence, Confidence]] = {"high": "medium", "medium": "low"}


def _lower(conf: Confidence) -> Confidence:
    return _LOWER.get(conf, "low")


def _mode_advice(p: Planner, mp: ModePlan, d: Decision,
                 host: str | None) -> tuple[Advice, dict[str, Any] | None]:
    """What the mode's verdict advises, and the buffer it names."""
    row = p.state().row
    b = row.budgets
    first = mp.first
    good = row.last_good_below_frontier
    m = mp.ladder.cells.get("M")
    if d.max_bs is not None and m is not None:
        m = replace(m, config=replace(m.config, max_bs=d.max_bs))
    a = Advice("inconclusive", at=b[first], keep=b[good] if good is not None else None,
               decide=d.would_decide or "re-run with --repeat 3",
               command=advice.next_command(d, host, b[first], b, p.spec.options.oversize_factor))
    if d.kind == "buffer_sizing" and d.workspace:
        a.kind = "workspace"
        a.max_bs = m.config.max_bs if m is not None else p.spec.small_max_bs
        if m is not None:
            a.command = advice.host_cmd(host, ("run",), "--budget", str(b[first]), "--max-bs",
                                        str(m.config.max_bs),
                                        note="the workaround, on its own")
        return a, None
    if d.kind in ("kernel", "graph_capture"):
        a.kind = "diverged" if d.kind == "graph_capture" and agreement.is_divergence(
            mp.ladder.mode) else d.kind
        return a, None
    if d.reason in ("nondeterministic", "not-decisive"):
        a.kind = "nondeterministic"
        a.command = advice.host_cmd(host, ("run",), "--budget", str(b[first]), "--differential",
                                    f"--extra={differential.DETERMINISTIC_FLAG}",
                                    note="graph vs eager with deterministic inference")
    if d.kind != "buffer_sizing":
        return a, None
    sus = {s.attr: s for s in p.spec.suspects}
    named = [sus[x] for x in d.buffers if x in sus]
    buffer: dict[str, Any]
    if len(named) == 1:
        buffer = _suspect_details(named[0], b)
        buffer["named_by"] = d.decided_by + (" (by elimination)" if d.by_elimination else "")
    else:
        buffer = {"attrs": list(d.buffers), "named_by": d.decided_by}
    a.kind = "buffer"
    a.buffers = list(d.buffers)
    a.where = [s.where for s in named]
    return a, buffer


def _mode_verdicts(p: Planner, mp: ModePlan, host: str | None) -> list[Verdict]:
    """The mode's verdict over the budgets with their own evidence, and one for the budgets it
    only assumes (not restarted)."""
    row = p.state().row
    b = row.budgets
    lad = mp.ladder
    idx = sorted({*mp.covered, *mp.uncontrolled, *mp.pending})
    d, ev = _verdict_base(p, mp, idx)
    res = row.obs[mp.first].first
    adv, buffer = _mode_advice(p, mp, d, host)
    conf = d.confidence
    if mp.uncontrolled or mp.pending:
        conf = _lower(conf)
    confirmed = None
    if p.spec.options.confirm_patch:
        co = p.obs(PlannedCell(lad.config, "confirm", lad.mode,
                               patch=p.spec.options.confirm_patch))
        confirmed = True if co.status == GOOD else False if co.status == BAD else None
    if confirmed:
        adv = _fixed_next(p.spec.options.confirm_patch or "PATCH", host, b[mp.first])
    out = [Verdict(kind=d.kind, budgets=[b[i] for i in idx],
                   signature=res.signature.id if res and res.signature else None,
                   outcome=res.outcome.value if res else "?", confidence=conf,
                   decided_by=d.decided_by, evidence=ev, buffer=buffer,
                   host=host, patch_confirmed=confirmed, would_decide=d.would_decide,
                   reason=d.reason, advice=adv)]
    if mp.assumed:
        out.append(_assumed_verdict(p, mp, d, res, host))
    return out


def _fixed_next(patch: str, host: str | None, budget: int) -> Advice:
    """The advice for a failure mode --confirm-patch fixed (the run keeps the patch)."""
    return Advice("fixed", at=budget, patch=patch, host=host or advice.HOST,
                  command=advice.host_cmd(host, ("patch", "status"),
                                          note=f"{patch} stays applied"))


def _assumed_verdict(p: Planner, mp: ModePlan, d: Decision, res: CellResult | None,
                     host: str | None) -> Verdict:
    b = p.spec.budgets
    names = ", ".join(f"b{b[i]}" for i in mp.assumed)
    seen = res.signature.id if res and res.signature else res.outcome.value if res else "?"
    ev = [_ev("assumed", f"{names} not restarted: between budgets that fail the same way "
              f"({seen}); "
              f"assumed {d.kind} like b{b[mp.first]} (not tested)")]
    return Verdict(kind=d.kind, budgets=[b[i] for i in mp.assumed],
                   signature=res.signature.id if res and res.signature else None,
                   outcome=res.outcome.value if res else "?", confidence="low",
                   decided_by="assumed (not tested)", evidence=ev,
                   host=host, tested=False, reason="assumed",
                   would_decide=f"a restart at {names} with its own control",
                   advice=Advice("assumed", budgets=[b[i] for i in mp.assumed],
                                 command=advice.bisect_cmd(
                                     host, "--budgets", ",".join(str(b[i]) for i in mp.assumed),
                                     "--thorough")))


def _extra_evidence(p: Planner, lad: LadderState) -> list[Evidence]:
    out: list[Evidence] = []
    opts = p.spec.options
    if opts.sanitize:
        zc = PlannedCell(lad.config, "sanitize", lad.mode)
        zo = p.obs(zc)
        if zo.decided:
            r = zo.first
            out.append(_ev("sanitize", f"compute-sanitizer: {describe(r)}", [zc],
                           findings=r.sanitizer if r else None))
        elif not opts.sanitize_available:
            out.append(_ev("sanitize", "sanitizer not available: " + (opts.sanitize_note or
                                                                       "no support")))
    if opts.confirm_patch:
        cc = PlannedCell(lad.config, "confirm", lad.mode, patch=opts.confirm_patch)
        co = p.obs(cc)
        if co.decided:
            verb = {GOOD: "passes: the patch fixes this mode",
                    BAD: "still fails: the patch does not fix this mode"}.get(co.status,
                                                                             co.status)
            out.append(_ev("patch", f"with {opts.confirm_patch} applied b{lad.config.budget} "
                           f"{verb} ({describe(co.first)})", [cc]))
    return out


def _unstarted_verdict(p: Planner, mode: str, idx: list[int], host: str | None) -> Verdict:
    b = p.spec.budgets
    res = p.state().row.obs[idx[0]].first
    return Verdict(kind="inconclusive", budgets=[b[i] for i in idx],
                   signature=res.signature.id if res and res.signature else None,
                   outcome=res.outcome.value if res else "?", confidence="low",
                   decided_by="none", evidence=_frontier_evidence(p, idx),
                   host=host, reason="unfinished",
                   would_decide="the budgets below it (the search did not finish)",
                   advice=Advice("unstarted", command=advice.bisect_cmd(
                       host, "--budgets", ",".join(str(x) for x in b))))


def _status_verdicts(p: Planner, host: str | None) -> list[Verdict]:
    """flaky (repeats disagree) and config_error (refused flags) verdicts."""
    row = p.state().row
    b = row.budgets
    out: list[Verdict] = []
    pairs: tuple[tuple[Status, VerdictKind], ...] = ((FLAKY, "flaky"), (REFUSED, "config_error"))
    for status, kind in pairs:
        idx = [i for i in range(len(b)) if row.obs[i].status == status]
        groups: dict[str, list[int]] = {}
        for i in idx:
            r = row.obs[i].first
            groups.setdefault((r.error or r.outcome.value) if r and kind != "flaky" else "",
                              []).append(i)
        for why, ii in groups.items():
            cells = [p.frontier_cell(b[i]) for i in ii]
            if kind == "flaky":
                seen = "; ".join(f"b{b[i]}: " + ", ".join(describe(r) for r in row.obs[i].results)
                                 for i in ii)
                ev = [_ev("repeat", f"repeats disagree: {seen}", cells)]
                adv = Advice("flaky", command=advice.bisect_cmd(
                    host, "--budgets", ",".join(str(b[i]) for i in ii), "--repeat", "5"))
            else:
                ev = [_ev("refused", f"the server refused the config: {why}", cells)]
                adv = Advice("config_error", command=advice.host_cmd(host, ("flags",)))
            out.append(Verdict(kind=kind, budgets=[b[i] for i in ii], signature=None,
                               outcome=kind if kind == "flaky" else "refused",
                               confidence="high" if kind == "config_error" else "low",
                               decided_by="repeats" if kind == "flaky" else "flags check",
                               evidence=ev, host=host, advice=adv))
    return out


def _ok_verdicts(p: Planner, host: str | None) -> list[Verdict]:
    """ok for the budgets restarted and passing (high), and a separate low-confidence ok for
    those only assumed (below a passing budget, never restarted)."""
    row = p.state().row
    b = row.budgets
    f = row.first_bad
    # a budget the latent check restarted under memcheck was tested (with graphs), not assumed
    memchecked = {i for i in row.assumed_good if p.obs(PlannedCell(
        replace(p.spec.base, budget=b[i], graph=True), "sanitize")).usable}
    goods = sorted({i for i in range(len(b)) if row.obs[i].status == GOOD} | memchecked)
    below = [i for i in goods if f is None or i < f]
    if not goods:
        return []
    top = below[-1] if below else goods[0]
    out = [_tested_ok(p, [b[i] for i in goods], top, host)]
    assumed = [i for i in row.assumed_good if i < top and i not in memchecked]
    if assumed:
        out.append(_assumed_ok([b[i] for i in assumed], host))
    return out


def _tested_ok(p: Planner, budgets: list[int], top: int, host: str | None) -> Verdict:
    """The ok for the budgets restarted and passing; `top`: the index of the one kept."""
    row = p.state().row
    b, f, ag = row.budgets, row.first_bad, p.spec.options.agreement
    ev = [_ev("frontier", f"b{b[top]} passes with CUDA graphs "
              f"({describe(row.obs[top].first)})", [p.frontier_cell(b[top])])]
    covers: list[dict[str, int]] = []  # comparisons that replayed only small batches' graphs
    for text, cells, det in agreement.ok_evidence(row, p.spec.base, ag, p.obs,
                                                  p.frontier_cell):
        cover = det.get("batch_coverage")
        ev.append(_ev("differential", text, cells, differential=det.get("differential"),
                      batch_coverage=cover))
        covers += [cover] if cover else []
    adv = Advice("works", keep=b[top], first_bad=None if f is None else b[f])
    if covers:
        adv.compared_requests = min(c["peak_requests"] for c in covers)
        adv.captured_bs = max(c["max_captured_bs"] for c in covers)
    unsure = bool(agreement.unconfirmed(row, p.spec.base, ag, p.obs) or covers)
    return Verdict(kind="ok", budgets=budgets, signature=None, outcome="ok",
                   confidence="medium" if unsure else "high", decided_by="frontier search",
                   evidence=ev, host=host, advice=adv)


def _assumed_ok(budgets: list[int], host: str | None) -> Verdict:
    """The low-confidence ok for the budgets below a passing one, never restarted."""
    names = ", ".join(f"b{x}" for x in budgets)
    return Verdict(
        kind="ok", budgets=budgets, signature=None, outcome="ok",
        confidence="low", decided_by="assumed (not tested)",
        evidence=[_ev("assumed", f"{names} not restarted: below a passing budget "
                      "(a failure that grows with the budget cannot start there, but one "
                      "at a single budget can): assumed ok, not tested")],
        host=host, tested=False, reason="assumed", would_decide=f"a restart at {names}",
        advice=Advice("works_assumed", budgets=list(budgets), command=advice.bisect_cmd(
            host, "--budgets", ",".join(str(x) for x in budgets), "--thorough")))


def _skip_verdict(p: Planner, host: str | None) -> Verdict:
    row = p.state().row
    b = row.budgets
    skipped = [i for i in range(len(b)) if row.obs[i].status == SKIP]
    ev = [_ev("skip", f"b{b[i]}: {describe(row.obs[i].first)}", [p.frontier_cell(b[i])])
          for i in skipped]
    return Verdict(kind="inconclusive", budgets=list(b), signature=None, outcome="error",
                   confidence="low", decided_by="none", evidence=ev,
                   host=host, reason="infrastructure", would_decide="any cell that runs",
                   advice=Advice("infrastructure", command=advice.host_cmd(
                       host, ("run",), "--budget", str(b[0]))))


def build_verdicts(p: Planner, *, host: str | None = None) -> list[Verdict]:
    st = p.state()
    out: list[Verdict] = []
    started = {mp.ladder.mode for mp in st.modes}
    for mode, idx in st.row.modes().items():
        if mode not in started:
            out.append(_unstarted_verdict(p, mode, idx, host))
    for mp in st.modes:
        out.extend(_mode_verdicts(p, mp, host))
    out = cures.apply(p, out, host)  # a cure that leaves another failure: a second verdict
    out.extend(_status_verdicts(p, host))
    oks = _ok_verdicts(p, host)
    if not oks and not st.row.modes() and not out:
        out.append(_skip_verdict(p, host))
    out = oks + sorted(out, key=lambda v: min(v.budgets) if v.budgets else 0)
    out = capacity.infer(p, out, host)
    out = latent.apply(out, st.row, p.spec.base, p.spec.suspects, p.spec.options.latent,
                       p.obs, host=host)
    return [_with_cheap(p, advice.finish(v)) for v in out]


def _with_cheap(p: Planner, v: Verdict) -> Verdict:
    """The verdict with the cells of its evidence that ran cheap named (and said why that
    is enough: only their crash, or an experiment's avoiding one, is used)."""
    keys = {k for e in v.evidence for k in e.cells}
    cheap = sorted(k for k in keys if k not in p.results and f"{k}+cheap" in p.results)
    if not cheap:
        return v
    note = _ev("note", "ran cheap (dummy weights, the batch sizes the question needs, no "
                       "warm-up): " + ", ".join(cheap) + "; only a crash, or an experiment "
                       "avoiding one, is taken from them (`--no-cheap-cells`: real weights "
                       "everywhere)", [f"{k}+cheap" for k in cheap])
    return replace(v, cheap_cells=cheap, evidence=[*v.evidence, note])


def run_status(verdicts: Sequence[Verdict]) -> RunStatus:
    """good (no failure) | bad (a failure was seen) | skip (nothing could be decided).

    A failure before the model is loaded in every config is a skip (a broken install, not a
    bad version for `git bisect`); any other failure whose cause is inconclusive is bad."""
    if any(v.kind in FAILURE_KINDS for v in verdicts):
        return "bad"
    if any(v.kind == "inconclusive" and v.tested and v.outcome not in ("error", "?")
           and v.reason != "preload" for v in verdicts):
        return "bad"
    if verdicts and all(v.kind == "ok" for v in verdicts):
        return "good"
    return "skip"


def exit_code(verdicts: Sequence[Verdict], *, protocol: ExitProtocol | None = None) -> int:
    """The run's exit code; protocol 'bisect' speaks `git bisect run` (0 good/1 bad/125 skip).

    Otherwise: 1 a failure was diagnosed; 14 every failure mode diagnosed was fixed by
    --confirm-patch (the run kept the patch); 6 a failure was seen but its cause is
    inconclusive (or nothing could run); 7 only refused configs; 0 nothing fails. Under the
    protocol a fixed failure is still bad: the commit without the patch fails."""
    st = run_status(verdicts)
    if protocol == "bisect":
        return {"good": 0, "bad": 1, "skip": int(ExitCode.BISECT_SKIP)}[st]
    bad = [v for v in verdicts if v.kind != "ok"]
    if bad and all(v.kind in FAILURE_KINDS and v.patch_confirmed for v in bad):
        return int(ExitCode.FIXED)
    if any(v.kind in FAILURE_KINDS for v in verdicts):
        return int(ExitCode.FAILED)
    if st == "good":
        return int(ExitCode.OK)
    if verdicts and all(v.kind == "config_error" for v in verdicts if v.kind != "ok"):
        return int(ExitCode.REFUSED)
    return int(ExitCode.INCONCLUSIVE)



