"""A cure that leaves another failure is a second defect (pure: no I/O).

When an experiment cures a failure mode (an oversize patch or a smaller max bs: the crash is
gone) the ladder calls it buffer sizing. The cured cell is still a graph cell at that budget,
and what it shows is evidence too: garbage once the mask is enlarged is a kernel defect or a
capture bug hiding behind the crash; a cured cell that passes can still differ from eager (a
stale scalar). So the mode's first budget gets a second diagnosis, from the cured cell:

* the cure as a real cell (`cure_cell`): a cheap run (dummy weights) answers only "no crash";
* it fails another way (mode X): where the row already diagnosed X at another budget, that
  diagnosis applies ("once cured, fails like b32"); else X's eager control at the budget:
  fails the same way -> kernel; passes -> graph_capture (medium: the enlarged buffers were the
  cure's, another captured buffer could still be short); fails differently -> inconclusive;
* it passes: its greedy output against eager at the budget (`agreement`), token by token; a
  divergence is judged like any other (eager repeated: nondeterminism is inconclusive, never
  graph_capture; eager with --enable-deterministic-inference where the host has it).

The mode's other budgets, cured by their own control, are assumed to carry the same second
defect (low confidence, not tested): the command that would decide each is given.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ddprobe.bisect import agreement
from ddprobe.bisect.cells import BAD, GOOD, Obs, PlannedCell, same_failure
from ddprobe.bisect.ladder import Decision, LadderState
from ddprobe.probes import differential
from ddprobe.results import CellResult


@dataclass(frozen=True)
class Residual:
    parent: str  # the cured failure mode (its ladder's label)
    budget: int
    cure: PlannedCell  # the curing experiment, as a real cell
    needed: tuple[PlannedCell, ...] = ()
    mode: str | None = None  # what the cured cell shows (a failure mode, or a divergence)
    decision: Decision | None = None  # the second defect (None: none, or not known yet)
    like: int | None = None  # the budget whose diagnosis of `mode` applies
    eager: PlannedCell | None = None  # the eager cell it was judged against
    notes: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        return not self.needed


def cure_cell(lad: LadderState) -> PlannedCell | None:
    """The experiment that cured the mode at its first budget, as a real cell."""
    d = lad.decision
    if d is None or d.kind != "buffer_sizing" or not lad.done:
        return None
    if d.workspace:
        if d.max_bs is None:
            return None
        return PlannedCell(replace(lad.config, max_bs=d.max_bs), "residual", lad.mode)
    if not d.buffers:
        return None
    return PlannedCell(lad.config, "residual", lad.mode, buffers=d.buffers, factor=d.factor)


Known = Mapping[str, tuple[int, Decision]]  # a diagnosed failure mode -> (budget, decision)


def analyse(lad: LadderState, real: Callable[[PlannedCell], Obs],
            obs: Callable[[PlannedCell], Obs], known: Known,
            opts: agreement.AgreementOptions) -> Residual | None:
    """Where the second diagnosis at the mode's first budget stands (None: no cure to read)."""
    cure = cure_cell(lad)
    if cure is None:
        return None
    r = Residual(lad.mode, lad.config.budget, cure)
    co = real(cure)
    if not co.decided:
        return replace(r, needed=(cure,))
    if co.status == BAD:
        return _failed(r, lad, co, obs, known)
    if co.status != GOOD:
        return replace(r, notes=(f"the cured cell with real weights: {co.status}",))
    if not opts.enabled:
        return replace(r, notes=("the cured cell's output was not compared with eager "
                                 f"({opts.off_reason})",))
    return _compared(r, lad, co, obs, opts)


def _failed(r: Residual, lad: LadderState, co: Obs, obs: Callable[[PlannedCell], Obs],
            known: Known) -> Residual:
    x = co.mode or "bad"
    if same_failure(x, lad.mode):
        return replace(r, mode=x, decision=Decision(
            "inconclusive", "none", "low", reason="no-evidence",
            notes=("with real weights the cure fails the same way (only its cheap run "
                   "avoided the failure)",),
            would_decide="the cure again with real weights (--no-cheap-cells)"))
    hit = next(((b, d) for m, (b, d) in known.items() if same_failure(m, x)
                and b != r.budget), None)
    if hit is not None:
        b, d = hit
        return replace(r, mode=x, like=b, decision=replace(
            d, confidence="medium" if d.confidence == "high" else "low", notes=(),
            decided_by="cured cell"))
    e = PlannedCell(replace(lad.config, graph=False), "eager", x)
    eo = obs(e)
    r = replace(r, mode=x, eager=e)
    if not eo.decided:
        return replace(r, needed=(e,))
    if eo.status == BAD and same_failure(eo.mode, x):
        return replace(r, decision=Decision("kernel", "eager control", "high"))
    if eo.status == GOOD:
        return replace(r, decision=Decision(
            "graph_capture", "cured cell", "medium",
            notes=("with CUDA graphs only: the cured cell fails, eager passes; the buffers "
                   "the cure enlarged are not the cause, another captured buffer could be",)))
    return replace(r, decision=Decision(
        "inconclusive", "eager control", "low", reason="eager-differs",
        notes=(f"without graphs it fails differently ({eo.mode})",),
        would_decide="a fix for the eager failure, then the cure again"))


def _compared(r: Residual, lad: LadderState, co: Obs, obs: Callable[[PlannedCell], Obs],
              opts: agreement.AgreementOptions) -> Residual:
    e = agreement.eager_cell(lad.config, lad.config.budget)
    eo = obs(e)
    r = replace(r, eager=e)
    if not eo.decided:
        return replace(r, needed=(e,))
    if eo.status != GOOD:
        return replace(r, notes=("the cured cell's output could not be compared: the eager "
                                 f"cell {eo.status}",))
    d = agreement.compare(co.first, eo.first, opts)
    if d.status not in (differential.DIVERGED, differential.NOT_DECISIVE):
        return replace(r, notes=(f"the cured cell against eager: {d.summary}",))
    r = replace(r, mode=agreement.DIVERGENCE)
    e2 = agreement.side_cell(e.config, opts)
    o2 = obs(e2)
    if not o2.decided:
        return replace(r, needed=(e2,))
    dec, note = agreement.which_side(co.first, eo, o2, opts)
    if dec is None:
        dec = Decision("graph_capture", "cured cell", "medium",
                       notes=(note, "the cured cell passes but its greedy output differs "
                                    "from eager's: a capture defect beside the buffer "
                                    "sizing"))
    return replace(r, decision=dec)


def evidence_lines(r: Residual, obs: Callable[[PlannedCell], Obs],
                   describe: Callable[[CellResult | None], str], factor: int,
                   opts: agreement.AgreementOptions) -> list[tuple[str, list[str], dict[str, Any]]]:
    """(summary, cells, details) lines of the second verdict."""
    co = obs(r.cure)
    what = (f"with {', '.join(r.cure.buffers)} enlarged x{r.cure.factor or factor}"
            if r.cure.buffers else f"with --cuda-graph-max-bs {r.cure.config.max_bs}")
    out: list[tuple[str, list[str], dict[str, Any]]] = [(
        f"b{r.budget} {what} (the cure of {r.parent}) avoids that failure, and with real "
        f"weights {'passes' if co.status == GOOD else 'fails'} ({describe(co.first)})",
        [r.cure.base_key], {})]
    if r.like is not None:
        out.append((f"it fails like b{r.like}: that budget's diagnosis applies", [], {}))
    if r.eager is not None:
        eo = obs(r.eager)
        if eo.decided:
            if co.status == GOOD and eo.status == GOOD:
                d = agreement.compare(co.first, eo.first, opts)
                out.append((f"the cured cell vs eager: {d.summary}",
                            [r.cure.base_key, r.eager.base_key], {"differential": d.to_dict()}))
            else:
                out.append((f"eager at b{r.budget}: {eo.status} ({describe(eo.first)})",
                            [r.eager.base_key], {}))
    return out


__all__ = ["Known", "Residual", "analyse", "cure_cell", "evidence_lines"]
