"""The plan a bisect prints before it runs (and alone with `--plan`) (pure).

An adaptive bisect has no fixed cell list, so the plan states the procedure, the first round,
and restart counts measured by running the planner against every possible single threshold
(see synthetic.py), next to what the full sweep would cost.
"""
from __future__ import annotations

from dataclasses import replace

from ddprobe.bisect import agreement, latent
from ddprobe.bisect.planner import BisectSpec, Planner
from ddprobe.bisect.static import Suspect
from ddprobe.bisect.synthetic import bounds, time_bounds

_PLACEHOLDER = Suspect(attr="<suspect buffer>", file="?", line=None, shape="?", scope="",
                       flags=(), tier=1)


def plan_lines(spec: BisectSpec, *, k: int = 1) -> list[str]:
    b = spec.budgets
    rep = spec.options.repeat
    lines = [f"plan: budgets {','.join(map(str, b))} with CUDA graphs"
             + (f", each cell x{rep} (--repeat)" if rep > 1 else "")
             + (f", {k} identical hosts per round (k-ary search)" if k > 1 else "")]
    lines += _step_lines(spec)
    lat = spec.options.latent
    lines.append(latent.plan_line(lat, spec.suspects, b))
    lines.append(agreement.plan_line(spec.options.agreement))
    first = Planner(spec).next_cells(k)
    lines.append("  first round: " + ", ".join(c.key for c in first))
    est_spec = spec if spec.suspects else replace(spec, suspects=(_PLACEHOLDER,))
    est_spec = replace(est_spec, options=replace(est_spec.options, confirm_patch=None,
                                                 sanitize=False, repeat=1,
                                                 latent=latent.LatentOptions()))
    lines.append(_restarts_line(est_spec, k, rep))
    lines.append(_time_line(est_spec, k, full=len(b) * rep))
    if lat.enabled and lat.available:
        n = latent.max_cells(spec.suspects, b)
        lines.append(f"  plus the latent check: at most {n} memcheck cell(s), one restart "
                     "each, when it is triggered (counted in the restarts reported)")
    return lines


def _step_lines(spec: BisectSpec) -> list[str]:
    """The plan's steps: the search, the classification, the experiments per mode."""
    b = spec.budgets
    lines = []
    if spec.options.thorough:
        lines.append("  1. --thorough: every budget restarted with CUDA graphs (none assumed)")
    else:
        lines.append(f"  1. b{b[-1]} first (the bad end); if it passes, smaller budgets are "
                     "assumed ok (not tested: --thorough restarts them); else binary search "
                     "down to the first failing budget")
    lines.append("  2. every budget above it classified by failure mode (restarted, or assumed "
                 "between two failures of one mode); each restarted failing budget gets its "
                 "own control (the experiment that decided its mode, repeated there)")
    order = spec.options.order
    how = {"auto": "first the experiment its signature suggests: oversize for a memory fault, "
                   "smaller max bs for a capacity error, else the eager control",
           "eager-first": "the eager control first, then oversize / smaller max bs",
           "graph-first": "oversize / smaller max bs first, the eager control last"}[order]
    lines.append(f"  3. per failure mode, at its first failing budget: {how} "
                 f"(max bs {spec.small_max_bs} for the max-bs experiment, then 1 if it "
                 "still fails)")
    if spec.suspects:
        lines.append(f"     oversize suspects (x{spec.options.oversize_factor}, escalated to "
                     "cover the static shortfall or x16 when it does not cure): "
                     + ", ".join(f"{s.attr} ({s.where})" for s in spec.suspects))
    lines.append("     what a cure leaves: a cure (oversize, smaller max bs) run cheap says only "
                 "\"no crash\", so it runs again with the real weights at the mode's first "
                 "budget; failing another way is a second defect (its own experiments), "
                 "passing, it is compared with eager at that budget (one restart each)")
    return lines + _option_lines(spec)


def _option_lines(spec: BisectSpec) -> list[str]:
    """The steps --confirm-patch and --sanitize add."""
    lines = []
    if spec.options.confirm_patch:
        lines.append(f"  4. --confirm-patch {spec.options.confirm_patch}: each failing cell "
                     "again with the patch; kept if it fixes one")
    if spec.options.sanitize:
        lines.append("     --sanitize: a compute-sanitizer cell per crash mode"
                     + ("" if spec.options.sanitize_available else
                        f" (not available: {spec.options.sanitize_note or 'no support'})"))
    return lines


def _restarts_line(est_spec: BisectSpec, k: int, rep: int) -> str:
    """The plan's restart counts (the bounds of `est_spec`, times the repeats)."""
    bd = bounds(est_spec, k=k)
    worst = max(v[0] for kk, v in bd.items() if kk != "none") * rep
    rounds = max(v[1] for kk, v in bd.items() if kk != "none")
    full = len(est_spec.budgets) * 2 * rep
    per = ", ".join(f"{kk} {v[0] * rep}" for kk, v in bd.items() if kk != "none")
    return (f"  restarts: {bd['none'][0] * rep} if every budget passes; at most {worst} "
            f"for one failure threshold ({per})"
            + (f" in at most {rounds} rounds" if k > 1 else "")
            + f"; the full sweep takes {full}")


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _time_line(spec: BisectSpec, k: int, *, full: int) -> str:
    """The plan's estimated time (the cost model: the host's earlier cells, else defaults)."""
    opts = spec.options
    tb = time_bounds(spec, k=k)
    worst = max(v for kk, v in tb.items() if kk != "none")
    graph = opts.cost.estimate(graph=True, cheap=False)
    eager = opts.cost.estimate(graph=False, cheap=False)
    sweep = full * (graph.total + eager.total)
    learned = sorted(set(graph.from_history) | set(eager.from_history))
    src = (f"phases learned from this host's earlier cells: {', '.join(learned)}; the rest "
           "defaults" if learned else "default phase times: no earlier cells of this host")
    per = ", ".join(f"{kk} {minutes(v)}" for kk, v in tb.items() if kk != "none")
    cheap = ("cheap cells where they save time (dummy weights for crash-or-not cells)"
             if opts.cheap else "every cell with the real weights")
    return (f"  time: about {minutes(tb['none'])} if every budget passes; at most "
            f"{minutes(worst)} for one failure threshold ({per}); the full sweep about "
            f"{minutes(sweep)}; a restart with graphs ~{minutes(graph.total)} ({cheap}; "
            f"{src})")
