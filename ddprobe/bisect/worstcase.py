"""The bisect's "restarts left" counter (one restart per cell): the worst case of the current
plan (pure: no I/O).

git bisect prints "N revisions left to test after this (roughly k steps)" and the number only
ever goes down. ddprobe's plan branches on every outcome (a new failure mode starts its own
diagnosis), so its counter is the *worst case*: the most cells the planner could still ask for,
over every answer the remaining cells could give. Each cell is answered by an adversary with
one of: good, bad in a failure mode already seen, or bad in a new mode. Since the answers that
really arrive are among those the worst case considered, the count after a cell is at most the
count before it minus one; `Countdown` also clamps it, so an answer outside the adversary's
alphabet (an infrastructure skip, a flaky repeat, a third unseen mode) cannot make it rise.

The search is exact for the plans ddprobe makes (a handful of budgets, three diagnosis steps a
mode); past `node_limit` planner states it stops and falls back to an upper bound that needs
no search (every untested budget a new mode with a full diagnosis), and says so.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ddprobe.bisect.cells import BAD, PlannedCell, mode_key, status_of
from ddprobe.results import CellResult, Outcome, Signature

NODE_LIMIT = 100  # planner states; beyond it, the search-free bound


@dataclass(frozen=True)
class Left:
    """What the counter shows: cells left in the worst case and the restarts they cost."""

    configs: int
    restarts: int
    exact: bool = True  # False: the search hit its limit; `configs` is the fallback bound


class Replayable(Protocol):
    """What the search needs of a planner (`planner.Planner` is one; this module imports it
    not): results fed in, the next round of cells asked for."""

    def record(self, cell: PlannedCell, result: CellResult) -> None: ...

    def next_cells(self, k: int = 1) -> list[PlannedCell]: ...


Mode = tuple[str, Outcome, "Signature | None"]  # (name, outcome, signature) of a failure mode


def _answers(cell: PlannedCell, modes: tuple[Mode, ...]) -> list[tuple[Mode, CellResult]]:
    def mk(outcome: Outcome, sig: Signature | None) -> CellResult:
        return CellResult("worst-case", cell.config, outcome, signature=sig,
                          timings={"restart": 0.0})
    ok: Mode = ("ok", Outcome.OK, None)
    new_name = f"new mode {len(modes) + 1}"
    new: Mode = (new_name, Outcome.CRASH, Signature("worst_case", new_name))
    return [(m, mk(m[1], m[2])) for m in (ok, *modes, new)]


def worst_case(make_planner: Callable[[], Replayable],
               history: list[tuple[PlannedCell, CellResult]], *, k: int = 1,
               node_limit: int = NODE_LIMIT) -> int | None:
    """Most cells still to run from `history` on, or None when the search passes `node_limit`.

    `make_planner()` returns a fresh planner of the same spec (with `record` and `next_cells`);
    the search replays `history` into it and explores the answers of each next round."""
    budget = [node_limit]
    memo: dict[tuple[tuple[str, str], ...], int] = {}

    class _Stop(Exception):
        pass

    def solve(path: tuple[tuple[PlannedCell, CellResult, str], ...], modes: tuple[Mode, ...],
              sig: tuple[tuple[str, str], ...]) -> int:
        if sig in memo:
            return memo[sig]
        budget[0] -= 1
        if budget[0] < 0:
            raise _Stop
        p = make_planner()
        for cell, res in history:
            p.record(cell, res)
        for cell, res, _ in path:
            p.record(cell, res)
        cells = p.next_cells(k)
        if not cells:
            memo[sig] = 0
            return 0
        best = 0
        # a round of k cells: the adversary answers each; explore the product lazily
        combos: list[tuple[tuple[tuple[PlannedCell, CellResult, str], ...],
                           tuple[Mode, ...]]] = [((), modes)]
        for cell in cells:
            nxt = []
            for got, ms in combos:
                for mode, res in _answers(cell, ms):
                    ms2 = ms if mode in ms or mode[0] == "ok" else (*ms, mode)
                    nxt.append(((*got, (cell, res, mode[0])), ms2))
            combos = nxt
        for got, ms in combos:
            npath = (*path, *got)
            nsig = tuple(sorted((*sig, *((c.key, n) for c, _, n in got))))
            best = max(best, len(cells) + solve(npath, ms, nsig))
        memo[sig] = best
        return best

    seen: list[Mode] = []
    for _, res in history:
        if status_of(res) == BAD:
            mode: Mode = (mode_key(res), res.outcome, res.signature)
            if mode[0] not in [m[0] for m in seen]:
                seen.append(mode)
    try:
        return solve((), tuple(seen), ())
    except _Stop:
        return None


def restarts_for(configs: int, k: int) -> int:
    """Rounds of k parallel hosts needed for `configs` cells (each round is one restart wait)."""
    return math.ceil(configs / max(1, k))


class Countdown:
    """The counter a run shows: the worst case, clamped so it never rises."""

    def __init__(self) -> None:
        self.last: int | None = None
        self.ran_since = 0

    def ran(self, n: int = 1) -> None:
        self.ran_since += n

    def show(self, worst: int) -> int:
        if self.last is not None:
            worst = min(worst, max(0, self.last - self.ran_since))
        self.last, self.ran_since = worst, 0
        return worst
