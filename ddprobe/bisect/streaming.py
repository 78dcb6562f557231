"""Each verdict the moment it is final: printed and journaled while the bisect goes on.

A verdict is final when no cell the planner may still ask for can change it:

* the frontier is settled: no frontier cell left (a frontier cell can move any mode's
  budgets), and no comparison left at a passing budget with a budget never restarted below it
  (a divergence there re-opens the search below); a comparison left at a pass also holds back
  every verdict above it (a divergence moves the last pass their evidence and their "keep
  budget <= N" name);
* no budget is assumed between two failures of one mode while that mode still has cells to
  run (its diagnoses may disagree, and the budget between is then restarted: it may land in
  any verdict);
* no remaining cell, needed or speculative, runs in the verdict's span: its budgets, every
  budget of a mode it shares one with (a mode's experiments run at its first budget, its
  controls at the others), and for `ok` every budget up to its largest (the latent check's
  memcheck cells restart passing and assumed ones); an `ok` also waits, at any budget, while
  an oversize of a fixed-size buffer is pending that can still be escalated, follows a
  failed factor, or starts above the first factor (curing, the smaller one runs after it):
  a factor that fails and a larger one that cures bound the buffer's capacity, which can
  move a pass out of `ok` (capacity.py).

Such a verdict is written to the journal as a `verdict_final` line (readers that do not know
the type skip it; the end of the run still writes every verdict as `verdict`) and sent as an
event, so a user can act on b64's verdict while b32 is still being tested, or stop and
`--resume` (a resumed run does not announce a verdict its journal already holds).
tests/test_verdict_stream.py runs matrices on which a looser rule announced verdicts that
later changed.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from ddprobe.bisect import agreement
from ddprobe.bisect.cells import BAD, UNTESTED, PlannedCell
from ddprobe.bisect.frontier import Row
from ddprobe.bisect.ladder import escalation, first_factor
from ddprobe.bisect.planner import Planner
from ddprobe.bisect.verdicts import build_verdicts
from ddprobe.results import CellResult, Verdict
from ddprobe.sources.buffers import FLAG_FIXED

FINAL: Final = "verdict_final"
_LOOKAHEAD: Final = 64


def identity(v: Verdict | dict[str, Any]) -> tuple[Any, ...]:
    d = v.to_dict() if isinstance(v, Verdict) else v
    return (tuple(d.get("budgets") or ()), d.get("kind"), d.get("signature"), d.get("latent"),
            d.get("host"))


def final_verdicts(p: Planner, *, host: str | None = None) -> list[Verdict]:
    """The verdicts no remaining cell of the plan can change (see the module doc)."""
    pending = p.next_cells(_LOOKAHEAD)
    row = p.state().row
    if _nothing_final(row, pending):
        return []
    touched = {c.config.budget for c in pending}
    modes = [set(row.budgets[idx[0]:idx[-1] + 1]) for idx in row.modes().values()]
    capacity = _capacity_open(p, pending)
    # a comparison that fails a pass moves the last pass below every mode above it (their
    # evidence and their "keep budget <= N" name it)
    compared = min((c.config.budget for c in pending if c.mode == agreement.COMPARE_MODE),
                   default=None)
    return [v for v in build_verdicts(p, host=host) if v.reason != "unfinished"
            and not (v.kind == "ok" and capacity)
            and not (compared is not None and max(v.budgets, default=0) > compared)
            and not touched & _span(v, modes, row.budgets)]


def _nothing_final(row: Row, pending: Sequence[PlannedCell]) -> bool:
    """Can a pending cell still change every verdict (the first two rules of the doc)?"""
    if any(c.purpose == "frontier" for c in pending):
        return True
    b = row.budgets
    untested = {i for i, o in enumerate(row.obs) if o.status == UNTESTED}
    at = {x: i for i, x in enumerate(b)}
    if any(c.mode == agreement.COMPARE_MODE and any(i < at.get(c.config.budget, -1)
                                                    for i in untested) for c in pending):
        return True
    touched = {c.config.budget for c in pending}
    return any(untested & set(idx) and touched & set(b[idx[0]:idx[-1] + 1])
               for idx in row.modes().values())


def _span(v: Verdict, modes: Sequence[set[int]], budgets: Sequence[int]) -> set[int]:
    """The budgets whose cells can change `v` (the third rule of the doc)."""
    sp = set(v.budgets)
    for m in modes:
        if sp & m:
            sp |= m
    if v.kind == "ok":
        sp |= {x for x in budgets if x <= max(v.budgets, default=0)}
    return sp


def _capacity_open(p: Planner, pending: Sequence[PlannedCell]) -> bool:
    """Can a pending oversize bound a fixed-size buffer's capacity? It does when a factor
    fails and a larger one cures (capacity.py): the pending factor may fail and be escalated,
    or a smaller factor failed before and this one may cure, or it starts above the first
    factor (the ladder's escalate_first) and curing, has the smaller one run after it. The
    bound can move passing budgets out of `ok`. The last factor the ladder tries, with none
    failed or skipped before it, cannot (failing, it cures nothing)."""
    fixed = {s.attr for s in p.spec.suspects if FLAG_FIXED in s.flags}
    default = p.spec.options.oversize_factor
    tried = [c for c in p.cells.values() if c.purpose == "oversize"]

    def skipped(c: PlannedCell) -> bool:
        tier1 = [s for s in p.spec.suspects if s.tier == 1]
        f0 = first_factor(tier1, c.config.budget, default) or default
        return (c.factor or default) > f0 and not p.obs(replace(c, factor=f0 if f0 != default
                                                              else None)).decided

    return any(c.purpose == "oversize" and fixed.intersection(c.buffers) and (
        escalation(p.spec.suspects, c.config.budget, c.factor or default) is not None
        or skipped(c)
        or any(t.mode == c.mode and t.config.budget == c.config.budget
               and p.obs(t).status == BAD for t in tried)) for c in pending)


def journaled(journal_path: Path | None) -> set[tuple[Any, ...]]:
    """The verdicts a (resumed) run's journal already announced."""
    out: set[tuple[Any, ...]] = set()
    if journal_path is None or not journal_path.is_file():
        return out
    for line in journal_path.read_text(encoding="utf-8", errors="replace").splitlines():
        if f'"{FINAL}"' not in line:
            continue
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and d.get("type") == FINAL:
            out.add(identity(d))
    return out


class VerdictStream:
    """Called after every recorded cell: announces the verdicts that just became final."""

    def __init__(self, planner: Planner, *, host: str | None,
                 append: Callable[[dict[str, Any]], None],
                 announce: Callable[[Verdict, dict[str, Any]], None],
                 seen: set[tuple[Any, ...]] | None = None) -> None:
        self.planner, self.host = planner, host
        self.append, self.announce = append, announce
        self.seen = set(seen or ())
        self.t0 = time.monotonic()
        self.cells = 0
        self.server_s = 0.0  # the cells' own wall time, summed (what the user waited)
        self.order: list[tuple[Verdict, dict[str, Any]]] = []

    def __call__(self, cell: PlannedCell, res: CellResult) -> None:
        self.cells += 1
        self.server_s += float(res.wall_s or 0.0)
        for v in final_verdicts(self.planner, host=self.host):
            key = identity(v)
            if key in self.seen:
                continue
            self.seen.add(key)
            when = {"after_cells": self.cells, "after_cell": cell.key,
                    "cells_s": round(self.server_s, 3),
                    "elapsed_s": round(time.monotonic() - self.t0, 3)}
            self.append({"type": FINAL, **v.to_dict(), "final": when})
            self.order.append((v, when))
            self.announce(v, when)
