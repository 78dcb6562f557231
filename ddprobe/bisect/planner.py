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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from ddprobe.bisect.cells import BAD, PENDING, UNTESTED, Obs, PlannedCell, observe
from ddprobe.bisect import latent
from ddprobe.bisect.frontier import Row, build_row, probes
from ddprobe.bisect.ladder import ORDERS, LadderState, diagnose
from ddprobe.bisect.static import Suspect
from ddprobe.bisect.worstcase import Countdown, bound, worst_case
from ddprobe.errors import UsageError
from ddprobe.results import CellResult, Config

DEFAULT_SMALL_MAX_BS: Final = 8


@dataclass(frozen=True)
class PlanOptions:
    order: str = "auto"  # auto | eager-first | graph-first (see ladder.step_order)
    repeat: int = 1
    sanitize: bool = False
    sanitize_available: bool = False
    sanitize_note: str = ""  # why not, when unavailable
    confirm_patch: str | None = None
    oversize_factor: int = 4
    latent: latent.LatentOptions = field(default_factory=latent.LatentOptions)


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


def small_max_bs_for(max_bs: int | None) -> int:
    """The max bs of the max-bs experiment: a quarter of the configured one (at least 1)."""
    return max(1, max_bs // 4) if max_bs else DEFAULT_SMALL_MAX_BS


@dataclass(frozen=True)
class PlanState:
    row: Row
    ladders: tuple[LadderState, ...]  # modes whose first failing budget is settled
    extras: tuple[PlannedCell, ...]  # sanitize / confirm cells (after a mode is decided)


class Planner:
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

    def obs(self, cell: PlannedCell | None) -> Obs:
        if cell is None:
            return Obs("none")
        return observe(self.results.get(cell.base_key, ()), self.spec.options.repeat)

    def frontier_cell(self, budget: int) -> PlannedCell:
        return PlannedCell(replace(self.spec.base, budget=budget, graph=True), "frontier")

    # -- state -----------------------------------------------------------------------------
    def state(self) -> PlanState:
        budgets = self.spec.budgets
        row = build_row(budgets, {b: self.obs(self.frontier_cell(b)) for b in budgets})
        ladders: list[LadderState] = []
        extras: list[PlannedCell] = []
        suspects = [s.attr for s in self.spec.suspects]
        opts = self.spec.options
        for mode, idx in row.modes().items():
            first = idx[0]
            if row.obs[first].status != BAD or not row.settled_below(first):
                continue
            cfg = replace(self.spec.base, budget=budgets[first], graph=True)
            lad = diagnose(mode, cfg, row.obs[first].first, suspects=suspects,
                           small_max_bs=self.spec.small_max_bs, order=opts.order, obs=self.obs)
            ladders.append(lad)
            if lad.done and lad.decision is not None:
                if opts.sanitize and opts.sanitize_available and \
                        row.obs[first].first is not None and \
                        row.obs[first].first.outcome.value == "crash":
                    extras.append(PlannedCell(cfg, "sanitize", mode))
                if opts.confirm_patch:
                    extras.append(PlannedCell(cfg, "confirm", mode, patch=opts.confirm_patch))
        extras += latent.planned(row, self.spec.base, self.spec.suspects, opts.latent, self.obs)
        return PlanState(row, tuple(ladders), tuple(extras))

    @property
    def done(self) -> bool:
        return not self.next_cells(1)

    # -- scheduling ------------------------------------------------------------------------
    def _due(self, cell: PlannedCell) -> list[PlannedCell]:
        """The repeats of `cell` still to run (none when it is decided)."""
        o = self.obs(cell)
        if o.decided:
            return []
        return [cell.with_rep(r) for r in range(o.reps_done + 1, self.spec.options.repeat + 1)]

    def next_cells(self, k: int = 1) -> list[PlannedCell]:
        """Up to k cells for the next round; needed first, then speculative ones."""
        st = self.state()
        needed: list[PlannedCell] = []
        spec: list[PlannedCell] = []
        for i, o in enumerate(st.row.obs):
            if o.status == PENDING:
                needed.append(self.frontier_cell(st.row.budgets[i]))
        need_idx, spec_idx = probes(st.row, k)
        needed += [self.frontier_cell(st.row.budgets[i]) for i in need_idx]
        spec += [self.frontier_cell(st.row.budgets[i]) for i in spec_idx]
        # modes in budget order; a likely-decisive first step is speculated on last
        lad_spec: list[tuple[int, int, PlannedCell]] = []
        for n, lad in enumerate(st.ladders):
            needed.extend(lad.needed)
            rank = 0 if lad.cls == "other" else 1
            lad_spec.extend((rank, n, c) for c in lad.speculative)
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

    def needed_count(self) -> int:
        """Cells that are needed for sure right now (not speculative)."""
        st = self.state()
        need_idx, _ = probes(st.row, 0)
        return len(need_idx) + sum(len(x.needed) for x in st.ladders) + len(st.extras)

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
            if callable(table):
                res = table(c)
            else:
                res = table.get(c.key) or table.get(c.base_key) or table.get(c.config.key)
            if res is None:
                raise KeyError(f"simulate: no result for {c.key}")
            p.record(c, res)
    return p, rounds
