"""Verdicts with their evidence, from the planner's state (pure).

One verdict per failure mode (buffer_sizing, graph_capture, kernel, inconclusive), plus `ok`
when nothing fails, `flaky` for cells whose repeats disagree and `config_error` for refused
flags. Each names the evidence that decided it, the cells it rests on, the log line, the
buffer with file:line and evaluated sizes, and the next step.
"""
from __future__ import annotations

import re

from collections.abc import Sequence
from typing import Any, Final

from ddprobe.bisect import latent
from ddprobe.bisect.cells import BAD, FLAKY, GOOD, REFUSED, SKIP, Obs, PlannedCell, describe
from ddprobe.bisect.ladder import Decision, LadderState
from ddprobe.bisect.planner import Planner
from ddprobe.bisect.static import Suspect, size_line
from ddprobe.exitcodes import ExitCode
from ddprobe.probes import differential
from ddprobe.results import Evidence, Verdict

FAILURE_KINDS: Final = ("buffer_sizing", "graph_capture", "kernel")


def _ev(kind: str, summary: str, cells: Sequence[PlannedCell | str] = (),
        **details: Any) -> Evidence:
    keys = [c if isinstance(c, str) else c.base_key for c in cells]
    return Evidence(kind=kind, summary=summary, cells=keys,
                    details={k: v for k, v in details.items() if v not in (None, [], {}, "")})


def _frontier_evidence(p: Planner, idx: list[int]) -> list[Evidence]:
    row = p.state().row
    b = row.budgets
    first = idx[0]
    fc = p.frontier_cell(b[first])
    out: list[Evidence] = []
    goods = [i for i in range(first) if row.obs[i].status == GOOD]
    if goods:
        g = goods[-1]
        out.append(_ev("frontier", f"b{b[g]} passes with CUDA graphs "
                       f"({describe(row.obs[g].first)}); "
                       f"b{b[first]} fails ({describe(row.obs[first].first)})",
                       [p.frontier_cell(b[g]), fc]))
        amb = [i for i in range(g + 1, first) if not row.obs[i].usable]
        if amb:
            out.append(_ev("frontier", "the first failing budget is one of "
                           + ", ".join(f"b{b[i]}" for i in [*amb, first])
                           + f" ({', '.join(f'b{b[i]} {row.obs[i].status}' for i in amb)})"))
    elif first == 0:
        out.append(_ev("frontier", f"the smallest budget given, b{b[0]}, already fails: "
                       "inconclusive for a threshold (add a smaller budget to find one)", [fc]))
    else:
        out.append(_ev("frontier", f"no budget below b{b[first]} could be tested "
                       f"({', '.join(f'b{b[i]} {row.obs[i].status}' for i in range(first))})"))
    tested = [i for i in idx if row.obs[i].status == BAD]
    inferred = [i for i in idx if row.obs[i].status != BAD]
    res = row.obs[first].first
    sig = res.signature if res else None
    summary = (sig.id if sig else f"outcome {res.outcome.value if res else '?'}")
    summary += " at " + ", ".join(f"b{b[i]}" for i in tested)
    if inferred:
        summary += "; " + ", ".join(f"b{b[i]}" for i in inferred) + \
            " inferred (between two failures of this mode, not restarted)"
    out.append(_ev("signature", summary, [p.frontier_cell(b[i]) for i in tested],
                   line=sig.line if sig else None,
                   log=list(res.log_excerpt[-12:]) if res else None,
                   log_path=res.log_path if res else None,
                   phase=res.extra.get("phase") if res else None))
    above = [i for i in range(first + 1, len(b)) if row.obs[i].status == GOOD]
    if above:
        out.append(_ev("frontier", "not a single threshold: "
                       + ", ".join(f"b{b[i]}" for i in above) + " passes again above it",
                       [p.frontier_cell(b[i]) for i in above]))
    return out


def _suspect_details(s: Suspect, budgets: Sequence[int]) -> dict[str, Any]:
    return {"attr": s.attr, "file": s.file, "line": s.line, "where": s.where, "expr": s.shape,
            "resolved": s.resolved, "flags": list(s.flags), "tier": s.tier,
            "growing_uses": list(s.growing_uses), "sizes": list(s.sizes),
            "sizes_text": size_line(s, budgets)}


def _static_evidence(p: Planner, lad: LadderState, budgets: Sequence[int]) -> Evidence | None:
    sus = p.spec.suspects
    if not sus:
        return _ev("static", "grep-buffers found no captured buffer to suspect (no oversize "
                   "experiment possible)")
    shown = [s for s in sus if s.attr in lad.naming] if lad.naming else list(sus)
    parts = []
    for s in shown[:4]:
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
        parts.append(f"{s.attr} ({s.where}, `{s.shape}`){why}; {sizes}")
    more = f" (+{len(shown) - 4} more)" if len(shown) > 4 else ""
    return _ev("static", "grep-buffers: " + "; ".join(parts) + more,
               buffers=[_suspect_details(s, budgets) for s in shown])


def _cell_evidence(p: Planner, lad: LadderState, mode_budget: int) -> list[Evidence]:
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
    ovs = [c for k, c in p.cells.items() if c.purpose == "oversize" and c.mode == lad.mode]
    for c in sorted(ovs, key=lambda c: -len(c.buffers)):
        o = p.obs(c)
        if not o.decided:
            continue
        what = ", ".join(c.buffers)
        verb = _verb(o, lad.mode, "passes", "still fails", known)
        out.append(_ev("oversize", f"with {what} x{factor} (temporary patch, reverted) "
                       f"b{mode_budget} {verb} ({describe(o.first)})", [c],
                       buffers=list(c.buffers), patches=list(o.first.patches) if o.first else None))
    m = lad.cells.get("M")
    if m is not None and p.obs(m).decided:
        o = p.obs(m)
        bs = m.config.max_bs
        if o.status == GOOD or (o.status == BAD and o.mode != lad.mode):
            txt = (f"b{mode_budget} with --cuda-graph-max-bs {bs} "
                   f"{_verb(o, lad.mode, 'passes', 'still fails', known)} "
                   f"({describe(o.first)}): "
                   "the failure scales with max bs x draft tokens: a fixed-capacity workspace")
        elif o.status == BAD:
            txt = (f"b{mode_budget} with --cuda-graph-max-bs {bs} still fails "
                   f"({describe(o.first)}): not a fixed-capacity workspace")
        else:
            txt = f"max-bs experiment: {o.status} ({describe(o.first)})"
        out.append(_ev("max_bs", txt, [m]))
    return out


def _verb(o: Obs, mode: str, good: str, bad: str, known: dict[str, int]) -> str:
    if o.status == GOOD:
        return good
    if o.status == BAD and o.mode != mode:
        like = f"like b{known[o.mode]}" if o.mode in known else "differently"
        return f"avoids this failure (then fails {like}, another failure mode)"
    if o.status == BAD:
        return bad
    return o.status


_NEXT: Final = {
    "kernel": "the kernel or algorithm is wrong at b{b} without CUDA graphs: try another "
              "--attention-backend at b{b}, keep budget <= {good} meanwhile, and report it "
              "upstream with the signature",
    "graph_capture": "b{b} works without CUDA graphs (--disable-cuda-graph) but enlarging the "
                     "suspect buffers does not help: a graph capture/replay bug (stale buffers, "
                     "capture-time state); keep budget <= {good} with graphs, try a newer "
                     "release, report it upstream",
    "workspace": "--cuda-graph-max-bs {small} at b{b} avoids this failure (other failure "
                 "modes may remain there), or enlarge the fixed workspace the failing call "
                 "uses; keep budget <= {good} at the current max bs",
    "buffer": "size {attr} ({where}) from the configured draft tokens, not a default; verify a "
              "fix with `ddprobe bisect ... --confirm-patch PATCH`; keep budget <= {good} "
              "with graphs meanwhile",
    "inconclusive": "re-run with --repeat 3 (or check the host's health); the experiments "
                    "could not tell the cause apart",
}


_NO_GOOD: Final = re.compile(r"keep budget <= \(none passed\)(?: with graphs| at the current "
                             r"max bs)?(?: meanwhile)?")


def _mode_verdict(p: Planner, lad: LadderState, idx: list[int], host: str | None) -> Verdict:
    row = p.state().row
    b = row.budgets
    first = idx[0]
    res = row.obs[first].first
    d: Decision = lad.decision or Decision("inconclusive", "none", "low",
                                           notes=("the diagnosis did not finish",))
    ev = _frontier_evidence(p, idx)
    cell_ev = _cell_evidence(p, lad, b[first])
    ev += [e for e in cell_ev if e.kind == "eager"]
    oversize_ran = any(c.purpose == "oversize" and c.mode == lad.mode and p.obs(c).decided
                       for c in p.cells.values())
    if oversize_ran or d.kind in ("graph_capture", "inconclusive") or (
            d.kind == "buffer_sizing" and not d.workspace):
        st = _static_evidence(p, lad, b)
        if st is not None:
            ev.append(st)
    ev += [e for e in cell_ev if e.kind != "eager"]
    ev += _extra_evidence(p, lad)
    for n in d.notes:
        ev.append(_ev("note", n))
    good = row.last_good_below_frontier
    fmt = {"b": b[first], "good": b[good] if good is not None else "(none passed)",
           "small": p.spec.small_max_bs}
    buffer = None
    if d.kind == "buffer_sizing" and d.workspace:
        nxt = _NEXT["workspace"].format(**fmt)
    elif d.kind == "buffer_sizing":
        sus = {s.attr: s for s in p.spec.suspects}
        named = [sus[a] for a in d.buffers if a in sus]
        if len(named) == 1:
            buffer = _suspect_details(named[0], b)
            buffer["named_by"] = d.decided_by + (" (by elimination)" if d.by_elimination else "")
        else:
            buffer = {"attrs": list(d.buffers), "named_by": d.decided_by}
        nxt = _NEXT["buffer"].format(attr=", ".join(d.buffers),
                                     where=", ".join(s.where for s in named) or "?", **fmt)
    else:
        nxt = _NEXT.get(d.kind, _NEXT["inconclusive"]).format(**fmt)
    if good is None:  # no budget passed: there is no "budget <= N" to keep
        nxt = _NO_GOOD.sub("no budget passed with CUDA graphs: run with --disable-cuda-graph "
                           "meanwhile", nxt)
    confirmed = None
    if p.spec.options.confirm_patch:
        cc = PlannedCell(lad.config, "confirm", lad.mode, patch=p.spec.options.confirm_patch)
        co = p.obs(cc)
        confirmed = True if co.status == GOOD else False if co.status == BAD else None
    return Verdict(kind=d.kind, budgets=[b[i] for i in idx],
                   signature=res.signature.id if res and res.signature else None,
                   outcome=res.outcome.value if res else "?", confidence=d.confidence,
                   decided_by=d.decided_by, evidence=ev, next_step=nxt, buffer=buffer,
                   host=host, patch_confirmed=confirmed)


def _extra_evidence(p: Planner, lad: LadderState) -> list[Evidence]:
    out: list[Evidence] = []
    opts = p.spec.options
    if opts.sanitize:
        zc = PlannedCell(lad.config, "sanitize", lad.mode)
        zo = p.obs(zc)
        if zo.decided:
            r = zo.first
            out.append(_ev("sanitize", f"compute-sanitizer: {describe(r)}", [zc],
                           findings=r.extra.get("sanitizer") if r else None))
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


def build_verdicts(p: Planner, *, host: str | None = None) -> list[Verdict]:
    st = p.state()
    row = st.row
    b = row.budgets
    out: list[Verdict] = []
    ladders = {lad.mode: lad for lad in st.ladders}
    for mode, idx in row.modes().items():
        lad = ladders.get(mode)
        if lad is None:
            res = row.obs[idx[0]].first
            out.append(Verdict(kind="inconclusive", budgets=[b[i] for i in idx],
                               signature=res.signature.id if res and res.signature else None,
                               outcome=res.outcome.value if res else "?", confidence="low",
                               decided_by="none", evidence=_frontier_evidence(p, idx),
                               next_step=_NEXT["inconclusive"], host=host))
            continue
        out.append(_mode_verdict(p, lad, idx, host))
    for status, kind in ((FLAKY, "flaky"), (REFUSED, "config_error")):
        idx = [i for i in range(len(b)) if row.obs[i].status == status]
        if not idx:
            continue
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
                nxt = "not a verdict: re-run with a higher --repeat, and check the host"
            else:
                ev = [_ev("refused", f"the server refused the config: {why}", cells)]
                nxt = "fix the flags (or use a version that has them) before bisecting"
            out.append(Verdict(kind=kind, budgets=[b[i] for i in ii], signature=None,
                               outcome=kind if kind == "flaky" else "refused",
                               confidence="high" if kind == "config_error" else "low",
                               decided_by="repeats" if kind == "flaky" else "flags check",
                               evidence=ev, next_step=nxt, host=host))
    goods = [i for i in range(len(b)) if row.obs[i].status == GOOD]
    f = row.first_bad
    below = [i for i in goods if f is None or i < f]
    if below:
        top = below[-1]
        ok_idx = sorted(set(below) | {i for i in row.assumed_good if i < top})
        ev = [_ev("frontier", f"b{b[top]} passes with CUDA graphs "
                  f"({describe(row.obs[top].first)})", [p.frontier_cell(b[top])])]
        assumed = [i for i in ok_idx if row.obs[i].status != GOOD]
        if assumed:
            ev.append(_ev("frontier", ", ".join(f"b{b[i]}" for i in assumed) +
                          " not restarted: below a passing budget (failures that grow "
                          "with the budget cannot start there); `ddprobe sweep` tests "
                          "every cell"))
        conf = "high" if f is not None or top == len(b) - 1 else "medium"
        nxt = (f"budgets up to {b[top]} work with CUDA graphs" if f is None else
               f"budgets up to {b[top]} work with CUDA graphs; b{b[f]} is the first failing one")
        out.insert(0, Verdict(kind="ok", budgets=[b[i] for i in ok_idx], signature=None,
                              outcome="ok", confidence=conf, decided_by="frontier search",
                              evidence=ev, next_step=nxt, host=host))
    elif not row.modes() and not any(v.kind in ("flaky", "config_error") for v in out):
        skipped = [i for i in range(len(b)) if row.obs[i].status == SKIP]
        ev = [_ev("skip", f"b{b[i]}: {describe(row.obs[i].first)}",
                  [p.frontier_cell(b[i])]) for i in skipped]
        out.append(Verdict(kind="inconclusive", budgets=list(b), signature=None,
                           outcome="error", confidence="low", decided_by="none",
                           evidence=ev, next_step="no cell could run (infrastructure): "
                           "check the host and the server (`ddprobe run`), then resume",
                           host=host))
    return latent.apply(out, row, p.spec.base, p.spec.suspects, p.spec.options.latent, p.obs,
                        host=host)


def run_status(verdicts: Sequence[Verdict]) -> str:
    """good (no failure) | bad (a failure was seen) | skip (nothing could be decided)."""
    if any(v.kind in FAILURE_KINDS for v in verdicts):
        return "bad"
    if any(v.kind == "inconclusive" and v.outcome not in ("error", "?") for v in verdicts):
        return "bad"
    if any(v.kind == "ok" for v in verdicts) and all(v.kind == "ok" for v in verdicts):
        return "good"
    return "skip"


def exit_code(verdicts: Sequence[Verdict], *, protocol: str | None = None) -> int:
    """The run's exit code; protocol 'bisect' speaks `git bisect run` (0 good/1 bad/125 skip)."""
    st = run_status(verdicts)
    if protocol == "bisect":
        return {"good": 0, "bad": 1, "skip": int(ExitCode.BISECT_SKIP)}[st]
    if st == "good":
        return int(ExitCode.OK)
    if st == "bad":
        return int(ExitCode.FAILED)
    if verdicts and all(v.kind == "config_error" for v in verdicts if v.kind != "ok"):
        return int(ExitCode.REFUSED)
    return int(ExitCode.INCONCLUSIVE)


def obs_summary(o: Obs) -> str:
    return f"{o.status} {describe(o.first)}" if o.first else o.status

