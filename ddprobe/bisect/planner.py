"""The bisect planner: from the outcomes so far, the next cells to run (pure: no I/O).

`Planner(spec)` holds the observations; `next_cells(k)` returns up to k cells for the next
round (needed ones first, then speculative ones that keep k parallel hosts busy);
`record(cell, result)` adds a result; `done` says the diagnosis is complete; `state()` gives the
row and each failure mode's ladder, from which `ddprobe.bisect.verdicts` writes the verdicts.

The whole procedure (see frontier.py and ladder.py):
1. graph row: the largest budget, then a binary search for the first failing budget; every
   budget above it is classified by failure mode (tested, or inferred between two failures of
   one mode);
2. per failure mode, at its first failing budget: eager control / oversize / max-bs
   experiments in the order its signature suggests, until one decides;
3. optional: a sanitize cell per crash mode (evidence only) and `--confirm-patch` cells;
4. the latent check (latent.py): memcheck cells on the passing graph budgets when grep-buffers
   flags a buffer or a higher budget fails with a memory fault.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from ddprobe.bisect import agreement, latent, residual
from ddprobe.bisect.cells import (
    BAD,
    GOOD,
    PENDING,
    UNTESTED,
    Obs,
    PlannedCell,
    mode_key,
    observe,
    same_failure,
)
from ddprobe.bisect.cheap import at_diagnosis, crash_mode, crash_prior, crashed
from ddprobe.bisect.costs import CostModel
from ddprobe.bisect.frontier import Row, build_row, probes
from ddprobe.bisect.ladder import (
    ORDERS,
    LadderInput,
    LadderState,
    Order,
    cured,
    diagnose,
    small_max_bs,
)
from ddprobe.bisect.residual import Residual
from ddprobe.bisect.served import before_model_load, served_max_bs
from ddprobe.bisect.static import Suspect, rank_by_traceback
from ddprobe.bisect.worstcase import Countdown, worst_case
from ddprobe.defaults import MAX_OVERSIZE_FACTOR, OVERSIZE_FACTOR
from ddprobe.errors import UsageError
from ddprobe.results import CellResult, Config

DEFAULT_SMALL_MAX_BS: Final = 8


@dataclass(frozen=True)
class PlanOptions:
    order: Order = "auto"  # see ladder.step_order
    repeat: int = 1
    sanitize: bool = False
    sanitize_available: bool = False
    sanitize_note: str = ""  # why not, when unavailable
    confirm_patch: str | None = None
    oversize_factor: int = OVERSIZE_FACTOR
    latent: latent.LatentOptions = field(default_factory=latent.LatentOptions)
    thorough: bool = False  # restart every budget (none is assumed ok)
    # graph vs eager at the passing budgets kept (agreement.py); --no-compare turns it off
    agreement: agreement.AgreementOptions = field(default_factory=agreement.AgreementOptions)
    # cheap cells (cheap.py) where the host supports them and the question allows; the cost
    # model picks them (and orders the cells) by expected time to a decision
    cheap: bool = False
    cost: CostModel = field(default_factory=CostModel)
    cheap_captured: int | None = None  # batch sizes a cheap graph cell captures


@dataclass(frozen=True)
class BisectSpec:
    budgets: tuple[int, ...]
    base: Config  # budget ignored; graph on; max bs / backend / extra args apply to every cell
    small_max_bs: int = DEFAULT_SMALL_MAX_BS
    suspects: tuple[Suspect, ...] = ()
    options: PlanOptions = field(default_factory=PlanOptions)

    def __post_init__(self) -> None:
        if not self.budgets:
            raise UsageError("no budgets given (e.g. --budgets 8,16,32)")
        if any(b <= 0 for b in self.budgets):
            raise UsageError("budgets must be positive integers")
        if list(self.budgets) != sorted(set(self.budgets)):
            raise UsageError("budgets must be distinct and increasing")
        if self.options.order not in ORDERS:
            raise UsageError(f"unknown order {self.options.order!r} (known: {', '.join(ORDERS)})")
        if self.options.repeat < 1:
            raise UsageError("--repeat must be >= 1")
        if not 2 <= self.options.oversize_factor <= MAX_OVERSIZE_FACTOR:
            raise UsageError(f"--oversize-factor must be 2 to {MAX_OVERSIZE_FACTOR}, got "
                             f"{self.options.oversize_factor}")


def small_max_bs_for(max_bs: int | None) -> int:
    """The max bs of the max-bs experiment: a quarter of the configured one (at least 1)."""
    return max(1, max_bs // 4) if max_bs else DEFAULT_SMALL_MAX_BS


RESIDUAL: Final = 3  # the most cells what a cure leaves needs (residual.py)


@dataclass(frozen=True)
class ModePlan:
    """One diagnosis (a failure mode, or one budget of it whose own control disagreed) and the
    budgets it covers: `covered` were restarted and have their own discriminating control (or
    are the budget the diagnosis ran at); `pending` wait for their control; `assumed` were not
    restarted (between two failures of the mode)."""

    ladder: LadderState
    first: int
    covered: tuple[int, ...]
    pending: tuple[int, ...] = ()
    assumed: tuple[int, ...] = ()
    uncontrolled: tuple[int, ...] = ()  # restarted, but their control could not run (skip)
    controls: Mapping[int, PlannedCell] = field(default_factory=dict)
    parent: str | None = None  # a budget's own diagnosis: the mode it split from


@dataclass(frozen=True)
class PlanState:
    row: Row
    ladders: tuple[LadderState, ...]  # modes whose first failing budget is settled
    extras: tuple[PlannedCell, ...]  # sanitize / confirm cells (after a mode is decided)
    modes: tuple[ModePlan, ...] = ()
    needed_frontier: tuple[int, ...] = ()  # budgets to restart before the verdicts hold
    compare: tuple[PlannedCell, ...] = ()  # graph-vs-eager comparisons due (agreement.py)
    residuals: tuple[Residual, ...] = ()  # what each cure leaves (residual.py)


def control_cell(lad: LadderState, cfg: Config, served: int | None,
                 fallback_bs: int) -> PlannedCell | None:
    """The experiment that decided `lad`, repeated at another budget of the mode (`cfg`)."""
    d = lad.decision
    if d is None:
        return None
    if d.kind in ("kernel", "graph_capture"):
        return PlannedCell(replace(cfg, graph=False), "eager", lad.mode)
    if d.kind == "buffer_sizing" and d.workspace:
        bs, _ = small_max_bs(served, fallback_bs)
        if d.max_bs is not None and (bs is None or d.max_bs < bs):
            bs = d.max_bs  # the max bs that cured it (bs 1 after a quarter still failed)
        return None if bs is None else PlannedCell(replace(cfg, max_bs=bs), "max_bs", lad.mode)
    if d.kind == "buffer_sizing" and d.buffers:
        return PlannedCell(cfg, "oversize", lad.mode, buffers=d.buffers, factor=d.factor)
    return None


def agrees(lad: LadderState, sig_mode: str, o: Obs) -> bool:
    """Does the control's result at another budget say what the mode's verdict says?"""
    d = lad.decision
    assert d is not None
    if d.kind == "kernel":
        return o.status == BAD and same_failure(o.mode, sig_mode)
    if d.kind == "graph_capture":
        return o.status == GOOD
    return cured(o, sig_mode).status == GOOD


def _between_disagreeing(plans: Sequence[ModePlan]) -> list[int]:
    """Assumed budgets whose nearest diagnosed neighbours below and above got different kinds:
    neither can be assumed for them."""
    kind_at: dict[int, str] = {}
    for mp in plans:
        d = mp.ladder.decision
        if d is not None and mp.ladder.done:
            kind_at.update(dict.fromkeys(mp.covered, d.kind))
    out = []
    for i in (i for mp in plans for i in mp.assumed):
        lo = max((j for j in kind_at if j < i), default=None)
        hi = min((j for j in kind_at if j > i), default=None)
        if lo is not None and hi is not None and kind_at[lo] != kind_at[hi]:
            out.append(i)
    return out


class Planner:
    label = "Bisecting"  # the progress line's (engine.Plan)
    exact_count = False  # remaining() is the worst case of the plan

    def __init__(self, spec: BisectSpec) -> None:
        self.spec = spec
        self.results: dict[str, list[CellResult]] = {}
        self.cells: dict[str, PlannedCell] = {}
        self._countdown = Countdown()

    # -- observations ----------------------------------------------------------------------
    def record(self, cell: PlannedCell, result: CellResult) -> None:
        self.results.setdefault(cell.base_key, []).append(result)
        self._countdown.ran()
        self.cells.setdefault(cell.base_key, replace(cell, rep=1))

    @property
    def cheap_on(self) -> bool:
        return self.spec.options.cheap and self.spec.options.repeat == 1

    def planned(self) -> dict[str, PlannedCell]:
        """The cells that ran, a cheap run counted as its real cell (the one it answers)."""
        out: dict[str, PlannedCell] = {}
        for c in self.cells.values():
            r = c.twin() if c.cheap else c
            out.setdefault(r.base_key, r)
        return out

    def obs(self, cell: PlannedCell | None) -> Obs:
        """What a cell's results say; a passing graph cell whose output differs from its
        eager comparison's fails (agreement.judge_graph): a frontier cell, and an experiment
        on a divergence (its cure is output equal to eager's, not a pass)."""
        o = self._obs(cell)
        if cell is not None and agreement.judged(cell, self.spec.options.agreement):
            return agreement.judge_graph(o, self._obs(agreement.eager_cell(
                self.spec.base, cell.config.budget)), strict=cell.purpose != "frontier",
                opts=self.spec.options.agreement)
        return o

    def real_obs(self, cell: PlannedCell) -> Obs:
        """What the cell's real runs say (a cheap run's answer left out)."""
        return observe(self.results.get(cell.base_key, ()), self.spec.options.repeat)

    def _obs(self, cell: PlannedCell | None) -> Obs:
        if cell is None:
            return Obs("none")
        real = observe(self.results.get(cell.base_key, ()), self.spec.options.repeat)
        if real.decided or cell.cheap or not self.cheap_on:
            return real
        return self._cheap_obs(cell) or real

    def _cheap_obs(self, cell: PlannedCell) -> Obs | None:
        """What the cell's cheap run answers for it: a crash is its crash; no crash answers an
        experiment on a crash mode (it avoided the crash); anything else is no answer."""
        rs = tuple(self.results.get(cell.twin().base_key, ()))
        if not rs:
            return None
        c = rs[-1]
        if crashed(c):
            return Obs(BAD, mode_key(c), rs, len(rs))
        if c.outcome.value in ("error", "refused"):
            return None
        if cell.purpose in ("oversize", "max_bs") and crash_mode(cell.mode):
            return Obs(GOOD, None, rs, len(rs))
        if cell.purpose == "sanitize" and cell.mode == latent.LATENT_MODE:
            # a memcheck cell: writes past a buffer are the config's; clean proves nothing
            o = observe(rs, 1)
            if latent.judge(cell.twin(), o, self.spec.suspects).status == latent.DIRTY:
                return o
        return None

    def question_is_cheap(self, cell: PlannedCell) -> float:
        """The chance a cheap run saves `cell`'s real run (0: it cannot). A frontier cell or
        an eager control: by a crash. An experiment on a crash mode is answered either way,
        but where it runs in the mode's own diagnosis a cure is run again with the real
        weights (residual.py: what the cure leaves), so only a crash that stays saves it
        (even odds); a control at another budget of the mode is saved either way."""
        if not self.cheap_on or cell.cheap or cell.patch or cell.rep > 1:
            return 0.0
        if cell.purpose in ("oversize", "max_bs"):
            if not crash_mode(cell.mode):
                return 0.0
            return 0.5 if at_diagnosis(cell, self.spec.budgets, self._frontier_obs) else 1.0
        if cell.purpose == "frontier":
            return crash_prior(cell.config.budget, self.spec.budgets, self._frontier_obs)
        if cell.purpose == "eager" and crash_mode(cell.mode):
            return 0.5
        if cell.purpose == "sanitize" and cell.mode == latent.LATENT_MODE:
            return 0.5  # the latent check's memcheck cell: invalid writes decide it
        return 0.0

    def estimate(self, cell: PlannedCell) -> float:
        """Expected seconds of the cell as it would be run next (cheap or real)."""
        cost = self.spec.options.cost
        graph = cell.config.graph
        cap = self.spec.options.cheap_captured if cell.cheap else None
        return cost.estimate(graph=graph, cheap=cell.cheap, captured=cap).total

    def _cheap_first(self, cell: PlannedCell) -> PlannedCell | None:
        """The cheap run to try before `cell`, when it is expected to save time: its cost is
        below the chance it decides times the real cell's cost."""
        p = self.question_is_cheap(cell)
        tw = cell.twin()
        if p <= 0.0 or self.results.get(tw.base_key):
            return None
        return tw if self.estimate(tw) < p * self.estimate(cell) else None

    def frontier_cell(self, budget: int) -> PlannedCell:
        return PlannedCell(replace(self.spec.base, budget=budget, graph=True), "frontier")

    def _frontier_obs(self, budget: int) -> Obs:
        return self.obs(self.frontier_cell(budget))

    # -- state -----------------------------------------------------------------------------
    def _ladder(self, mode: str, i: int, name: str = "") -> LadderState:
        row_obs = self.obs(self.frontier_cell(self.spec.budgets[i]))
        cfg = replace(self.spec.base, budget=self.spec.budgets[i], graph=True)
        opts = self.spec.options
        # the crash's own traceback ranks the suspects (its innermost frames name the writer)
        crash = row_obs.first
        suspects = tuple(rank_by_traceback(self.spec.suspects, crash.log_excerpt)) \
            if crash is not None else self.spec.suspects
        lad = diagnose(LadderInput(mode, cfg, row_obs.first, suspects,
                                   self.spec.small_max_bs, opts.order, opts.oversize_factor,
                                   self.obs, name=name,
                                   escalate_first=self.cheap_on and not crash_mode(mode)))
        return agreement.gate(lad, self.obs, opts.agreement)

    def _mode_plans(self, row: Row, mode: str, idx: list[int]) -> list[ModePlan]:
        """The mode's diagnosis at its first budget, then one control per other restarted
        budget; a budget whose control disagrees gets its own diagnosis."""
        b = self.spec.budgets
        first = idx[0]
        lad = self._ladder(mode, first)
        tested = [i for i in idx[1:] if row.obs[i].status == BAD]
        assumed = tuple(i for i in idx[1:] if row.obs[i].status != BAD)
        if not lad.done:
            return [ModePlan(lad, first, (first,), tuple(tested), assumed)]
        covered, pending, loose, controls, subs = [first], [], [], {}, []
        for i in tested:
            res = row.obs[i].first
            cc = control_cell(lad, replace(lad.config, budget=b[i]), served_max_bs(res),
                              self.spec.small_max_bs)
            if cc is None:  # inconclusive at the first budget: nothing to repeat here
                covered.append(i)
                continue
            controls[i] = cc
            o = self.obs(cc)
            if not o.decided:
                pending.append(i)
            elif not o.usable:
                loose.append(i)
            elif agrees(lad, mode, o):
                covered.append(i)
            else:
                sub = self._ladder(mode, i, name=f"{mode} @b{b[i]}")
                subs.append(ModePlan(sub, i, (i,), parent=mode))
        return [ModePlan(lad, first, tuple(covered), tuple(pending), assumed,
                         uncontrolled=tuple(loose), controls=controls), *subs]

    def state(self) -> PlanState:
        budgets = self.spec.budgets
        row = build_row(budgets, {b: self.obs(self.frontier_cell(b)) for b in budgets})
        plans: list[ModePlan] = []
        extras: list[PlannedCell] = []
        opts = self.spec.options
        compare = agreement.planned(row, self.spec.base, opts.agreement, self.obs)
        for mode, idx in row.modes().items():
            first = idx[0]
            if row.obs[first].status != BAD or not row.settled_below(first):
                continue
            if compare and agreement.is_divergence(mode):
                continue  # its first budget may still move down: compare first
            plans.extend(self._mode_plans(row, mode, idx))
        for mp in plans:
            lad = mp.ladder
            if lad.done and lad.decision is not None and lad.decision.kind != "inconclusive":
                first_res = row.obs[mp.first].first
                if opts.sanitize and opts.sanitize_available and first_res is not None and \
                        first_res.outcome.value == "crash":
                    extras.append(PlannedCell(lad.config, "sanitize", lad.mode))
                if opts.confirm_patch:
                    extras.append(PlannedCell(lad.config, "confirm", lad.mode,
                                              patch=opts.confirm_patch))
        extras += latent.planned(row, self.spec.base, self.spec.suspects, opts.latent,
                                 self.obs)
        return PlanState(row, tuple(mp.ladder for mp in plans), tuple(extras), tuple(plans),
                         self._frontier_needed(row, plans), tuple(compare),
                         tuple(self._residuals(plans)))

    def _residuals(self, plans: Sequence[ModePlan]) -> list[Residual]:
        """What each cure leaves at its mode's first budget (a second defect, or none). A
        second defect diagnosed at one budget is a diagnosis of the row too: a later cured
        cell that fails like it takes it over (no eager control of its own)."""
        b = self.spec.budgets
        known = {mp.ladder.mode: (b[mp.first], mp.ladder.decision) for mp in plans
                 if mp.ladder.done and mp.ladder.decision is not None
                 and mp.ladder.decision.kind != "inconclusive" and mp.parent is None}
        out = []
        for mp in plans:
            r = residual.analyse(mp.ladder, self.real_obs, self.obs, known,
                                 self.spec.options.agreement)
            if r is not None:
                out.append(r)
                d = r.decision
                if r.mode and r.like is None and d is not None and d.kind != "inconclusive":
                    known = {**known, r.mode: (r.budget, d)}
        return out

    def _frontier_needed(self, row: Row, plans: Sequence[ModePlan]) -> tuple[int, ...]:
        """Budgets to restart beyond the binary search: every budget with --thorough; the
        smallest when the top fails before the model is loaded; an assumed budget between two
        budgets whose diagnoses disagree."""
        untested = [i for i in range(len(row.budgets)) if row.obs[i].status == UNTESTED]
        if self.spec.options.thorough:
            return tuple(untested)
        out: list[int] = []
        bads = [o.first for o in row.obs if o.status == BAD]
        if 0 in untested and bads and all(before_model_load(c) for c in bads):
            out.append(0)
        out += _between_disagreeing(plans)
        return tuple(sorted(set(out)))

    @property
    def done(self) -> bool:
        return not self.next_cells(1)

    # -- scheduling ------------------------------------------------------------------------
    def _due(self, cell: PlannedCell) -> list[PlannedCell]:
        """The repeats of `cell` still to run (none when it is decided)."""
        o = self.obs(cell)
        if o.decided:
            return []
        tw = self._cheap_first(cell)
        if tw is not None:
            return [tw]
        return [cell.with_rep(r) for r in range(o.reps_done + 1, self.spec.options.repeat + 1)]

    def _frontier_cells(self, st: PlanState, k: int) -> tuple[list[PlannedCell], list[PlannedCell]]:
        """The frontier's needed cells (with the comparisons) and its speculative ones."""
        needed = [self.frontier_cell(st.row.budgets[i]) for i, o in enumerate(st.row.obs)
                  if o.status == PENDING]
        # largest first with cheap cells: a budget below a known pass is unlikely to crash, so
        # its real cell runs without a cheap try (`cheap.crash_prior`)
        extra = reversed(st.needed_frontier) if self.cheap_on else iter(st.needed_frontier)
        needed += [self.frontier_cell(st.row.budgets[i]) for i in extra]
        need_idx, spec_idx = probes(st.row, k)
        search = [self.frontier_cell(st.row.budgets[i]) for i in need_idx]
        # a divergence seen: the next comparison likely moves the frontier down, so it goes
        # first; none seen: a pass the search finds would make it moot (a new kept budget)
        diverged = any(agreement.is_divergence(m) for m in st.row.modes())
        needed += [*st.compare, *search] if diverged else [*search, *st.compare]
        return needed, [self.frontier_cell(st.row.budgets[i]) for i in spec_idx]

    def next_cells(self, k: int = 1) -> list[PlannedCell]:
        """Up to k cells for the next round; needed first, then speculative ones."""
        st = self.state()
        needed, spec = self._frontier_cells(st, k)
        # modes in budget order; a likely-decisive first step is speculated on last
        lad_spec: list[tuple[int, int, PlannedCell]] = []
        lad_needed: list[PlannedCell] = []
        for n, mp in enumerate(st.modes):
            lad = mp.ladder
            lad_needed.extend(lad.needed)
            lad_needed.extend(mp.controls[i] for i in mp.pending if i in mp.controls)
            rank = 0 if lad.cls == "other" else 1
            lad_spec.extend((rank, n, c) for c in lad.speculative)
        if self.cheap_on:
            # by expected time to a decision: a cell a cheap run decides goes first (the
            # modes are independent; the comparisons ran before: every verdict above a pass
            # waits for its comparison); ties keep the budget order
            lad_needed.sort(key=self._due_cost)
        needed.extend(lad_needed)
        needed.extend(c for r in st.residuals for c in r.needed)  # what a cure leaves
        needed.extend(st.extras)
        lad_spec.sort(key=lambda t: (t[0], t[1]))
        spec.extend(c for _, _, c in lad_spec)
        out: list[PlannedCell] = []
        seen: set[str] = set()
        for c in [*needed, *spec]:
            for due in self._due(c):
                if due.key not in seen and len(out) < k:
                    seen.add(due.key)
                    out.append(due)
        return out

    def _due_cost(self, cell: PlannedCell) -> float:
        due = self._due(cell)
        return self.estimate(due[0]) if due else 0.0

    def needed_count(self) -> int:
        """Cells that are needed for sure right now (not speculative)."""
        st = self.state()
        need_idx, _ = probes(st.row, 0)
        return (len(need_idx) + len(st.needed_frontier) + len(st.extras) + len(st.compare)
                + sum(len(mp.ladder.needed) + len(mp.pending) for mp in st.modes)
                + sum(len(r.needed) for r in st.residuals))

    def remaining(self) -> tuple[int, int]:
        """(configs left, restarts left) in the worst case of the current plan: the most cells
        the planner could still ask for over every answer they could give (see worstcase.py).
        It never rises from one call to the next, like git bisect's "revisions left"."""
        hist = [(self.cells[k], r) for k, rs in self.results.items() for r in rs]
        exact = worst_case(lambda: Planner(self.spec), hist)
        left = bound(self) if exact is None else min(exact, bound(self))
        shown = self._countdown.show(left)
        return shown, shown


Oracle = Callable[[PlannedCell], CellResult]


def simulate(spec: BisectSpec, table: Mapping[str, CellResult] | Oracle, *, k: int = 1,
             max_rounds: int = 200) -> tuple[Planner, list[list[PlannedCell]]]:
    """Run the planner against known answers (for --plan estimates and tests).

    `table` maps a cell's key (or base key, or plain config key) to its result, or is a
    function of the planned cell."""
    p = Planner(spec)
    rounds: list[list[PlannedCell]] = []
    for _ in range(max_rounds):
        cells = p.next_cells(k)
        if not cells:
            break
        rounds.append(cells)
        for c in cells:
            res: CellResult | None
            if callable(table):
                res = table(c)
            else:
                res = table.get(c.key) or table.get(c.base_key) or table.get(c.config.key)
            if res is None:
                raise KeyError(f"simulate: no result for {c.key}")
            p.record(c, res)
    return p, rounds


def bound(p: Planner) -> int:
    """The "restarts left" counter's fallback when the search of `worstcase.worst_case` passes
    its limit (and a cap of its answer). An upper bound without search: every untested budget
    may fail in a new mode of its own and need a full diagnosis (each step, the halving of the
    suspects, the extra cells)."""
    st = p.state()
    spec = p.spec
    opts = spec.options
    n_sus = len(spec.suspects)
    naming = math.ceil(math.log2(n_sus)) if n_sus > 1 else 0
    extra = int(bool(opts.confirm_patch)) + int(bool(opts.sanitize and opts.sanitize_available))
    # one mode's whole diagnosis (E, O, its escalation O2, M, its escalation M2) and what a
    # cure leaves (residual.py: the cure with real weights, eager, eager once more)
    full = (5 if n_sus else 3) + naming + extra + RESIDUAL
    # each untested budget: its restart, a diagnosis of its own, or a control of its own
    left = sum(len(g.untested) for g in st.row.gaps) * (2 + full)
    left += len(getattr(st, "needed_frontier", ())) * (2 + full)
    left += sum(len(mp.pending) for mp in getattr(st, "modes", ()))
    left += sum(1 for o in st.row.obs if o.status == "pending")
    left += _ladders_left(p, st, naming, extra)
    left += sum(RESIDUAL for r in st.residuals if not r.done)
    left += sum(1 for c in st.extras if not p.obs(c).decided)
    left += _latent_left(p, st)
    started = {lad.mode for lad in st.ladders}
    left += full * sum(1 for m in st.row.modes() if m not in started)
    left += _compare_left(p, st, full)
    return left * opts.repeat


def _ladders_left(p: Planner, st: PlanState, naming: int, extra: int) -> int:
    """The started ladders' cells left: an undecided one's steps (and their escalations), a
    decided one's naming of the buffer and what its cure leaves."""
    left = 0
    for lad in st.ladders:
        if lad.decision is None:
            steps = [s for s in lad.order if s in lad.cells and not p.obs(lad.cells[s]).decided]
            left += len(steps) + extra + RESIDUAL
            if "O" in steps:
                left += naming + 1  # + its escalation (O2) when x factor does not cure
            if "M" in steps:
                left += 1  # + its escalation (M2, bs 1) when a quarter does not cure
        elif lad.needed:  # still naming the buffer, then what the cure leaves
            left += math.ceil(math.log2(max(2, len(lad.naming))))
            left += RESIDUAL if lad.decision.kind == "buffer_sizing" else 0
    return left


def _compare_left(p: Planner, st: PlanState, full: int) -> int:
    """The graph-vs-eager comparison's cells (agreement.py): an eager cell per untested budget
    and per passing one not yet compared (each may become the kept one), and a divergence
    mode's eager repeat and diagnosis."""
    if not p.spec.options.agreement.enabled:
        return 0
    row = st.row
    untested = sum(len(g.untested) for g in row.gaps)
    uncompared = sum(1 for i, o in enumerate(row.obs) if o.status == "good" and not p.obs(
        agreement.eager_cell(p.spec.base, row.budgets[i])).decided)
    if not (untested or uncompared or st.compare):
        return 0
    return untested + uncompared + 1 + full


def _latent_left(p: Planner, st: PlanState) -> int:
    """The latent check's memcheck cells not yet planned (it plans one at a time)."""
    opts = p.spec.options.latent
    if not (opts.enabled and opts.available):
        return 0
    t = latent.trigger(st.row, p.spec.suspects)
    if t is None:
        return 0
    planned = {c.base_key for c in st.extras}
    cells = [latent.cell_for(p.spec.base, st.row.budgets[i]) for i in latent.targets(st.row, t)]
    return sum(1 for c in cells if c.base_key not in planned and not p.obs(c).decided)
