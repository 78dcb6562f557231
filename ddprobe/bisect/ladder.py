"""One failure mode's diagnosis: which experiment next, and what the results decide (pure).

The experiments, all at the mode's first failing budget:

* eager control (`E`): the same config without CUDA graphs. Fails *the same way* -> kernel.
  Fails in a different way -> not proof of anything (an eager-only bug can hide a graph-only
  one): the graph experiments still decide.
* oversize (`O`): a temporary patch enlarging the suspect captured buffers x factor (the
  suspects come from grep-buffers). Passes -> buffer sizing, then the suspect set is halved
  until one buffer is named. Still failing -> escalate (`O2`) to a factor that covers the
  static estimate of the shortfall (x16 when it is unknown) before ruling buffer sizing out;
  and only suspects whose size should follow the budget (tier 1) can rule it out at all: a
  fixed-size buffer that is the same at every budget says nothing about a budget threshold.
* max bs (`M`): a smaller --cuda-graph-max-bs than the server *really ran* (its captured batch
  sizes, not the inventory). Passes -> a fixed-capacity workspace is too small for max_bs x
  draft tokens (buffer sizing). Still failing the same way -> escalate (`M2`) to max bs 1: a
  quarter of max bs can still overrun a workspace (x16 rows at max bs 64 and 16 alike), so
  only bs 1 failing rules a workspace out, and even then a capacity error (cuBLAS, OOM) at one
  request's tree cannot be told from a capture bug: `inconclusive`, never graph_capture. When
  the server already runs the smallest value, or the cell ran the same max bs as the failing
  one, the experiment is no evidence.

Failures before the model is loaded (import errors, NCCL init, a hang at weight loading) run
only the eager control: when it fails before the model is loaded too, the mode is
`inconclusive` (nothing budget- or graph-related ran).

Every experiment except `E` changes only graph capture, so a cure by `O` or `M` proves the
failure graph-related without the eager control, and the verdict does not depend on the order
the steps ran in. The order is picked from the failure's signature so the likely-decisive
experiment runs first: a memory fault suggests an overrun (O first); a capacity error at
capture (cuBLAS, OOM) a workspace (M first); anything else (garbage, hang): E first.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Literal, get_args

from ddprobe.bisect.cells import BAD, GOOD, NONE, SAME, UNTESTED, Obs, PlannedCell, same_failure
from ddprobe.bisect.served import before_model_load, served_max_bs
from ddprobe.bisect.static import Suspect
from ddprobe.defaults import MAX_OVERSIZE_FACTOR
from ddprobe.results import CellResult, Confidence, Config, VerdictReason
from ddprobe.sources.buffers import FLAG_FIXED

# what one mode's ladder decides (a Verdict's kind, of the four a ladder can reach)
DecisionKind = Literal["buffer_sizing", "graph_capture", "kernel", "inconclusive"]
# where the failure struck, from its signature: picks the order of the experiments
FailureClass = Literal["preload", "memory", "capacity", "other"]
Order = Literal["auto", "eager-first", "graph-first"]  # --order
Step = Literal["E", "O", "O2", "M", "M2"]  # eager, oversize, escalated oversize, max bs, bs 1
# the experiment that decided a mode (Decision.decided_by; a Verdict's decided_by takes it):
# the ladder's, and the graph-vs-eager gate's (`agreement.gate`)
DecidedBy = Literal["eager control", "oversize experiment", "oversize bisection",
                    "max-bs experiment", "none", "eager repeated", "deterministic eager",
                    "stored baseline", "graph-vs-eager comparison", "cured cell"]

MEMORY_KINDS: Final = frozenset({"cuda_illegal_address", "cuda_misaligned_address",
                                 "cuda_device_assert", "cuda_launch_failure", "rocm_memory_fault",
                                 "sanitizer_oob", "segfault"})
CAPACITY_KINDS: Final = frozenset({"cublas", "cudnn", "oom", "capture_range"})
ORDERS: Final[tuple[Order, ...]] = get_args(Order)
ESCALATED_FACTOR: Final = 16
MAX_FACTOR: Final = MAX_OVERSIZE_FACTOR
NONE_OBS: Final = Obs(NONE)


def failure_class(c: CellResult | None) -> FailureClass:
    """preload | memory | capacity | other, from the signature (and where it struck)."""
    if before_model_load(c):
        return "preload"
    if c is None or c.signature is None:
        return "other"
    kind = c.signature.kind
    if kind in MEMORY_KINDS:
        return "memory"
    if kind in CAPACITY_KINDS:
        return "capacity"
    return "other"


def step_order(cls: FailureClass, order: Order) -> tuple[Step, ...]:
    if cls == "preload":
        return ("E",)
    graph = _GRAPH_STEPS[cls]
    if order == "eager-first":
        return ("E", *graph)
    if order == "graph-first":
        return (*graph, "E")
    return _AUTO_STEPS[cls]


_GRAPH_STEPS: Final[dict[FailureClass, tuple[Step, ...]]] = {
    "memory": ("O", "O2", "M", "M2"), "capacity": ("M", "M2", "O", "O2"),
    "other": ("O", "O2", "M", "M2")}
_AUTO_STEPS: Final[dict[FailureClass, tuple[Step, ...]]] = {
    "memory": ("O", "O2", "E", "M", "M2"), "capacity": ("M", "M2", "O", "O2", "E"),
    "other": ("E", "O", "O2", "M", "M2")}


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    decided_by: DecidedBy
    confidence: Confidence
    buffers: tuple[str, ...] = ()  # named buffer(s), for buffer_sizing by oversize
    by_elimination: bool = False
    workspace: bool = False  # buffer_sizing decided by the max-bs experiment
    notes: tuple[str, ...] = ()
    factor: int | None = None  # the oversize factor that cured it (None: the run's default)
    max_bs: int | None = None  # the --cuda-graph-max-bs that cured it (workspace)
    would_decide: str = ""  # inconclusive: the experiment that would decide it
    reason: VerdictReason = ""  # inconclusive: why


@dataclass(frozen=True, kw_only=True)
class LadderState:
    """Where one mode's diagnosis stands (built by keyword: ten fields, four of them tuples)."""

    mode: str
    config: Config  # the failing graph config (first failing budget of the mode)
    cls: FailureClass
    order: tuple[Step, ...]
    decision: Decision | None
    needed: tuple[PlannedCell, ...]
    speculative: tuple[PlannedCell, ...]
    naming: tuple[str, ...] = ()  # candidates still in the oversize bisection
    cells: dict[str, PlannedCell] = field(default_factory=dict)  # step name -> planned cell
    notes: tuple[str, ...] = ()  # why an experiment was left out

    @property
    def done(self) -> bool:
        return self.decision is not None and not self.needed


def cured(o: Obs, mode: str) -> Obs:
    """A graph experiment judged against the mode it tests: a result that fails *differently*
    (another failure mode shows once this one is avoided, e.g. b64's cuBLAS failure is gone
    with a smaller max bs and b32's garbage appears) counts as avoiding this mode."""
    if o.status == BAD and o.mode != mode:
        return Obs(GOOD, o.mode, o.results, o.reps_done)
    return o


def _first_half(c: Sequence[str]) -> tuple[str, ...]:
    return tuple(c[:max(1, len(c) // 2)])


def needed_factor(suspects: Sequence[Suspect], budget: int) -> int | None:
    """The enlargement that covers the static estimate of the shortfall at `budget` (the
    largest demand / allocation over the suspects), or None when no size could be evaluated."""
    need: float | None = None
    for s in suspects:
        for z in s.sizes:
            if z.get("budget") != budget:
                continue
            el, dem = z.get("elements"), z.get("demand_elements")
            if isinstance(el, int) and el > 0 and isinstance(dem, int) and dem > 0:
                need = max(need or 0.0, dem / el)
    return None if need is None else max(1, math.ceil(need))


def escalation(suspects: Sequence[Suspect], budget: int, factor: int) -> int | None:
    """The second oversize factor to try when x`factor` did not cure, or None (covered)."""
    need = needed_factor(suspects, budget)
    if need is None:
        return ESCALATED_FACTOR if factor < ESCALATED_FACTOR else None
    if need <= factor:
        return None
    return min(MAX_FACTOR, 1 << (need - 1).bit_length())


def small_max_bs(served: int | None, fallback: int) -> tuple[int | None, str]:
    """(the max-bs experiment's value or None, why not): a quarter of what the server ran."""
    if served is None:
        return fallback, ""
    if served <= 1:
        return None, (f"the server already captures only bs {served}: no smaller max bs "
                      "to try")
    return max(1, served // 4), ""


@dataclass(frozen=True)
class LadderInput:
    mode: str  # the failure mode (signature) it diagnoses: what a cure must avoid
    config: Config
    failing: CellResult | None
    suspects: Sequence[Suspect]
    small_max_bs: int  # the fallback when the server did not say what it ran
    order: Order
    factor: int
    obs: Callable[[PlannedCell], Obs]
    name: str = ""  # the ladder's name (a budget's own diagnosis: "MODE @b48"); default: mode
    # the oversize experiment starts at the factor it would escalate to: when its cells need
    # the real weights, the smaller factor's result cannot change the decision (a larger
    # enlargement covers what a smaller one does), only which factor it names. Where a
    # suspect is a fixed-size buffer and the larger factor cures, the smaller one runs too
    # (`O0`): its failure bounds the buffer's capacity (capacity.py), which can move a
    # passing budget out of `ok`
    escalate_first: bool = False

    @property
    def label(self) -> str:
        return self.name or self.mode


@dataclass
class _Cells:
    E: PlannedCell
    M: PlannedCell | None
    O: PlannedCell | None  # noqa: E741 (the ladder's name for the oversize experiment)
    O2: PlannedCell | None
    notes: list[str]
    O2_spec: PlannedCell | None = None  # the escalation, before O's result is known
    M2: PlannedCell | None = None  # max bs 1, once the smaller max bs still failed
    O0: PlannedCell | None = None  # the factor escalate_first skipped, once O cured (fixed)

    def named(self) -> dict[str, PlannedCell]:
        return {k: v for k, v in (("E", self.E), ("M", self.M), ("M2", self.M2),
                                  ("O", self.O), ("O2", self.O2)) if v is not None}


def _cells(li: LadderInput, cls: FailureClass) -> _Cells:
    notes: list[str] = []
    E = PlannedCell(replace(li.config, graph=False), "eager", li.label)
    if cls == "preload":
        return _Cells(E, None, None, None, notes)
    M, M2 = _max_bs_cells(li, notes)
    O, O2, spec2 = _oversize_cells(li)  # noqa: E741
    return _Cells(E, M, O, O2, notes, spec2, M2, _skipped_factor(li, O))


def _max_bs_cells(li: LadderInput,
                  notes: list[str]) -> tuple[PlannedCell | None, PlannedCell | None]:
    """(the smaller max bs, max bs 1 once the smaller one still failed); why a max bs is
    not tried goes to `notes`."""
    cfg, label = li.config, li.label
    bs, why = small_max_bs(served_max_bs(li.failing), li.small_max_bs)
    if why:
        notes.append(why)
    M = PlannedCell(replace(cfg, max_bs=bs), "max_bs", label) if bs is not None else None
    M2 = None
    if M is not None and bs is not None and bs > 1 and \
            cured(_m_obs(li, M), li.mode).status == BAD:
        M2 = PlannedCell(replace(cfg, max_bs=1), "max_bs", label)
    return M, M2


def _oversize_cells(li: LadderInput) -> tuple[PlannedCell | None, PlannedCell | None,
                                               PlannedCell | None]:
    """(the oversize cell, its escalation once it still failed, the escalation to run in
    parallel before its result is known)."""
    cfg, label = li.config, li.label
    names = tuple(s.attr for s in li.suspects)
    if not names:
        return None, None, None
    tier1 = [s for s in li.suspects if s.tier == 1]
    f1 = _first_factor(li, tier1)
    O = PlannedCell(cfg, "oversize", label, buffers=names, factor=f1)  # noqa: E741
    f2 = escalation(tier1, cfg.budget, f1 or li.factor)
    if f2 is None:
        return O, None, None
    o = li.obs(O)
    if o.status == BAD and cured(o, li.mode).status == BAD:
        return O, PlannedCell(cfg, "oversize", label, buffers=names, factor=f2), None
    if not o.decided:  # worth running in parallel on a spare host
        return O, None, PlannedCell(cfg, "oversize", label, buffers=names, factor=f2)
    return O, None, None


def first_factor(tier1: Sequence[Suspect], budget: int, factor: int) -> int | None:
    """The oversize cell's factor before any escalation (None: the default `factor`): when
    grep-buffers evaluated the shortfall and x factor would not cover it, start there."""
    need = needed_factor(tier1, budget)
    return min(MAX_FACTOR, 1 << (need - 1).bit_length()) if need and need > factor else None


def _first_factor(li: LadderInput, tier1: list[Suspect]) -> int | None:
    """The oversize cell's factor (None: the default), escalated with `escalate_first`."""
    f1 = first_factor(tier1, li.config.budget, li.factor)
    if li.escalate_first:  # (the cell has suspects)
        f1 = escalation(tier1, li.config.budget, f1 or li.factor) or f1
    return f1


def _skipped_factor(li: LadderInput, first: PlannedCell | None) -> PlannedCell | None:
    """The oversize at the factor `escalate_first` skipped, once the escalated one (`first`)
    cured and a suspect is a fixed-size buffer: that factor failing bounds the buffer
    (capacity.py)."""
    if first is None or not li.escalate_first or \
            not any(FLAG_FIXED in s.flags for s in li.suspects):
        return None
    tier1 = [s for s in li.suspects if s.tier == 1]
    f0 = first_factor(tier1, li.config.budget, li.factor)
    if (f0 or li.factor) == (first.factor or li.factor) or \
            cured(li.obs(first), li.mode).status != GOOD:
        return None
    return replace(first, factor=f0)


def _m_obs(li: LadderInput, M: PlannedCell | None) -> Obs:
    """The max-bs experiment's result, or `none` when it is no evidence: it ran the same
    max bs as the failing cell (the server rewrote or ignored the flag)."""
    if M is None:
        return NONE_OBS
    o = li.obs(M)
    if not o.decided or o.first is None:
        return o
    ran, failed_at = served_max_bs(o.first), served_max_bs(li.failing)
    if ran is not None and failed_at is not None and ran >= failed_at:
        return Obs(SAME, o.mode, o.results, o.reps_done)
    return o


def diagnose(li: LadderInput) -> LadderState:
    """Where the mode's diagnosis stands, and which cells it needs next."""
    cls = failure_class(li.failing)
    steps = step_order(cls, li.order)
    cs = _cells(li, cls)
    cells = cs.named()
    ob = _observe_all(li, cs)
    tier1 = any(s.tier == 1 for s in li.suspects)
    decision = _decide(li.mode, cls, ob.eager, ob.oversize, ob.escalated, ob.max_bs,
                       tier1=tier1, escalate_pending=cs.O2 is not None and not ob.escalated.decided,
                       m_possible=cs.M is not None)
    if decision is not None and decision.workspace:
        m = cs.M2 if cs.M2 is not None and ob.max_bs2.status == GOOD else cs.M
        decision = replace(decision, max_bs=m.config.max_bs if m is not None else None)
    notes = tuple(cs.notes)

    def state(d: Decision | None, needed: tuple[PlannedCell, ...] = (),
              spec: tuple[PlannedCell, ...] = ()) -> LadderState:
        return LadderState(mode=li.label, config=li.config, cls=cls, order=steps, decision=d,
                           needed=needed, speculative=spec, cells=cells, notes=notes)

    if decision is not None:
        if cs.O0 is not None and decision.decided_by == "oversize experiment" and \
                not li.obs(cs.O0).decided:
            return state(decision, (cs.O0,))
        cure = ob.cure(cs)
        if decision.decided_by == "oversize experiment" and cure is not None:
            st = _naming(li, cure, decision, cls)
            if st is not None:
                return replace(st, cls=cls, order=steps, cells=cells, notes=notes)
        return state(decision)
    remaining = [s for s in steps if s in cells and not li.obs(cells[s]).decided]
    if not remaining:
        return state(_inconclusive(cls, ob.eager, ob.oversize, ob.escalated,
                                   ob.max_bs2 if cs.M2 is not None else ob.max_bs,
                                   tier1=tier1, has_suspects=cs.O is not None,
                                   m_notes=cs.notes))
    return state(None, (cells[remaining[0]],), _speculative(li, cs, cls, remaining))


@dataclass(frozen=True)
class _Observed:
    """What each experiment of the ladder says about the failure mode (cured or not)."""

    eager: Obs
    max_bs: Obs  # the smaller max bs, or bs 1 once it failed (the strongest evidence run)
    oversize: Obs
    escalated: Obs
    max_bs2: Obs = NONE_OBS  # max bs 1
    skipped: Obs = NONE_OBS  # the factor escalate_first skipped (`O0`)

    def cure(self, cs: _Cells) -> PlannedCell | None:
        """The oversize cell that cured it (the skipped smaller factor when it cured too;
        the escalation when only that one did); None when neither did: an enlargement that
        failed has nothing to narrow down."""
        if cs.O0 is not None and self.skipped.status == GOOD:
            return cs.O0
        if self.oversize.status == GOOD:
            return cs.O
        if self.escalated.status == GOOD:
            return cs.O2
        return None


def _observe_all(li: LadderInput, cs: _Cells) -> _Observed:
    mode = li.mode
    m1 = cured(_m_obs(li, cs.M), mode)
    m2 = cured(_m_obs(li, cs.M2), mode) if cs.M2 is not None else NONE_OBS
    # the max-bs evidence: a cure by either; a failure only once bs 1 failed too (a pending
    # bs 1 leaves it undecided)
    mo = m1 if cs.M2 is None or m1.status != BAD else (
        m2 if m2.status in (GOOD, BAD) else Obs(UNTESTED) if not m2.decided else m2)
    return _Observed(eager=li.obs(cs.E), max_bs=mo,
                     oversize=cured(li.obs(cs.O), mode) if cs.O else NONE_OBS,
                     escalated=cured(li.obs(cs.O2), mode) if cs.O2 else NONE_OBS, max_bs2=m2,
                     skipped=cured(li.obs(cs.O0), mode) if cs.O0 else NONE_OBS)


def _speculative(li: LadderInput, cs: _Cells, cls: FailureClass,
                 remaining: Sequence[str]) -> tuple[PlannedCell, ...]:
    """Cells worth running on spare hosts beside the next one needed."""
    cells = cs.named()
    spec = [cells[s] for s in remaining[1:]]
    if cs.O2_spec is not None:
        spec.append(cs.O2_spec)
    if cs.O is not None and len(cs.O.buffers) > 1 and "O" in remaining:
        # if the oversize cure holds, the first halving cell is the next one needed
        spec.insert(0 if cls == "memory" else len(spec),
                    PlannedCell(li.config, "oversize", li.label,
                                buffers=_first_half(cs.O.buffers)))
    return tuple(spec)


def _naming(li: LadderInput, cure: PlannedCell, decision: Decision,
            cls: FailureClass) -> LadderState | None:
    """Halve the suspects while the oversize cure holds (at the factor that cured)."""
    mode, config, label = li.mode, li.config, li.label
    cand = tuple(cure.buffers)
    by_elim = stuck = False
    while len(cand) > 1:
        t = _first_half(cand)
        ot = replace(cure, buffers=t)
        o = li.obs(ot)
        st = cured(o, mode).status
        if st == GOOD:
            cand, by_elim = t, False
        elif st == BAD:
            cand, by_elim = tuple(x for x in cand if x not in t), True
        elif st == UNTESTED or not o.decided:
            spec = [replace(cure, buffers=_first_half(sub))
                    for sub in (t, tuple(x for x in cand if x not in t)) if len(sub) > 1]
            d = replace(decision, buffers=cand, factor=cure.factor)
            return LadderState(mode=label, config=config, cls=cls, order=(), decision=d,
                               needed=(ot,), speculative=tuple(spec), naming=cand)
        else:  # skip/flaky: cannot narrow further
            stuck = True
            break
    n = len(cure.buffers)
    how: DecidedBy = "oversize bisection" if n > 1 and len(cand) == 1 else "oversize experiment"
    notes = decision.notes
    if stuck:
        notes += (f"could not narrow the enlarged set below {len(cand)} buffers "
                  "(a narrowing cell did not run)",)
    elif len(cand) > 1:
        notes += ("several buffers enlarged together cured it",)
    d = replace(decision, buffers=cand, by_elimination=by_elim, decided_by=how,
                confidence="medium" if by_elim or stuck else "high", notes=notes,
                factor=cure.factor)
    return LadderState(mode=label, config=config, cls=cls, order=(), decision=d, needed=(),
                       speculative=(), naming=cand)


def _decide(mode: str, cls: FailureClass, eo: Obs, oo: Obs, o2: Obs, mo: Obs, *, tier1: bool,
            escalate_pending: bool, m_possible: bool) -> Decision | None:
    if cls == "preload":
        return None if eo.status == BAD and before_model_load(eo.first) else \
            _eager_only(mode, eo)
    cure = _cure(mode, cls, eo, oo, o2, mo)
    if cure is not None:
        return cure
    if not _graph_only(cls, eo, mo):
        return None
    return _capture_by_elimination(cls, oo, o2, mo, tier1=tier1,
                                   escalate_pending=escalate_pending, m_possible=m_possible)


def _cure(mode: str, cls: FailureClass, eo: Obs, oo: Obs, o2: Obs, mo: Obs) -> Decision | None:
    """A decision one experiment proves: the eager control fails the same way (kernel), an
    oversize or a smaller max bs cures it (buffer sizing)."""
    if eo.status == BAD and same_failure(eo.mode, mode):
        return Decision("kernel", "eager control", "high")
    if oo.status == GOOD or o2.status == GOOD:
        return Decision("buffer_sizing", "oversize experiment", "high")
    if mo.status == GOOD:
        strong = cls == "capacity" or oo.status == BAD
        return Decision("buffer_sizing", "max-bs experiment", "high" if strong else "medium",
                        workspace=True)
    return None


def _graph_only(cls: FailureClass, eo: Obs, mo: Obs) -> bool:
    """Eager passes: a graph-only failure. Not yet for a capacity error with no smaller max bs
    really run (a fixed workspace is not ruled out); never while eager is untested or fails
    differently."""
    if eo.status != GOOD:
        return False
    return not (cls == "capacity" and mo.status != BAD)


def _capture_by_elimination(cls: FailureClass, oo: Obs, o2: Obs, mo: Obs, *, tier1: bool,
                            escalate_pending: bool, m_possible: bool) -> Decision | None:
    """graph_capture once the budget-sized suspects, enlarged, did not cure it (and, but for
    an `other` failure, a smaller max bs did not either). Never for a capacity error: a
    fixed workspace too small even at max bs 1 fails the same way as a capture bug."""
    if cls == "capacity":
        return None
    m = mo.status
    oversize_ruled_out = tier1 and oo.status == BAD and not escalate_pending and \
        o2.status in (BAD, NONE)
    m_done = m in (BAD, NONE, SAME) or not m_possible
    needs_m = cls != "other"
    if oversize_ruled_out and (m_done or not needs_m):
        conf: Confidence = "high" if m == BAD or not needs_m else "medium"
        return Decision("graph_capture", "oversize experiment", conf)
    return None


def _eager_only(mode: str, eo: Obs) -> Decision | None:
    """A pre-load failure whose eager control did something else (passes, fails later)."""
    if not eo.decided:
        return None
    if eo.status == GOOD:
        return Decision("inconclusive", "eager control", "low", reason="preload-graph",
                        notes=("with CUDA graphs the server fails before the model is loaded, "
                               "without them it works: nothing of the graph path ran yet",),
                        would_decide="the server log of the graph cell (what fails before "
                                     "loading)")
    return None


def _inconclusive(cls: FailureClass, eo: Obs, oo: Obs, o2: Obs, mo: Obs, *, tier1: bool,
                  has_suspects: bool, m_notes: Sequence[str]) -> Decision:
    notes = list(m_notes)
    for name, o in (("eager control", eo), ("oversize", oo), ("escalated oversize", o2),
                    ("max-bs", mo)):
        if o.status not in (GOOD, BAD, NONE):
            notes.append(f"{name}: {o.status}" + (" max bs as the failing cell: no evidence"
                                                  if o.status == SAME else ""))
    if cls == "preload" and before_model_load(eo.first):
        return Decision(
            "inconclusive", "eager control", "low", reason="preload",
            notes=("the server fails before the model is loaded, with and without CUDA "
                   "graphs: no budget, graph or kernel code ran", *notes),
            would_decide="fix the start-up failure first (the import, NCCL/driver or weight "
                         "loading step in the log), then bisect again")
    if eo.status == BAD:
        return Decision(
            "inconclusive", "eager control", "low", reason="eager-differs",
            notes=(f"without graphs it fails differently ({eo.mode}); a different failure "
                   "is not proof of a kernel defect, and no graph experiment cured the graph "
                   "failure", *notes),
            would_decide="a fix for the eager failure (then the eager control again), or a "
                         "patch for the graph failure (--confirm-patch)")
    if eo.status == GOOD and cls == "capacity":
        tried = "max bs 1 fails the same way" if mo.status == BAD else \
            "no smaller max bs could be tried"
        return Decision(
            "inconclusive", "max-bs experiment", "low", reason="graph-undecided",
            notes=(f"graph-related (eager passes), a capacity error at capture, and {tried}: "
                   "a fixed workspace too small for one request's tree and a capture bug "
                   "look the same (no experiment ddprobe runs tells them apart)", *notes),
            would_decide="a patch enlarging the workspace the failing call uses "
                         "(--confirm-patch PATCH), or the failing call's own log")
    if eo.status == GOOD:
        why = ("no captured buffer whose size should follow the budget could be enlarged "
               "(the fixed-size suspects are the same at every budget)"
               if has_suspects and not tier1 else
               "grep-buffers found no captured buffer to enlarge" if not has_suspects else
               "buffer sizing and graph capture could not be told apart")
        return Decision(
            "inconclusive", "eager control", "low", reason="graph-undecided",
            notes=(f"graph-related (eager passes), but {why}", *notes),
            would_decide="an oversize patch of the buffer the failing kernel writes "
                         "(grep-buffers --backend ... to find it, then --confirm-patch), or "
                         "a larger --oversize-factor")
    return Decision("inconclusive", "none", "low", reason="no-evidence", notes=tuple(notes),
                    would_decide="re-run with --repeat 3 (or check the host's health)")
