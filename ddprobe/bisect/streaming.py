"""Each verdict the moment it is final: printed and journaled while the bisect goes on.

A verdict is final when no cell the planner may still ask for can change it: the frontier is
settled (no frontier cell left anywhere: a frontier cell can move a mode's budgets), and no
remaining cell, needed or speculative, runs at one of its budgets (a mode's experiments run at
its first budget, its controls at its other budgets, the latent check's memcheck cells at the
passing ones). Such a verdict is written to the journal as a `verdict_final` line (readers
that do not know the type skip it; the end of the run still writes every verdict as
`verdict`) and sent as an event, so a user can act on b64's verdict while b32 is still being
tested, or stop and `--resume` (a resumed run does not announce a verdict its journal already
holds).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from ddprobe.bisect.cells import PlannedCell
from ddprobe.bisect.planner import Planner
from ddprobe.bisect.verdicts import build_verdicts
from ddprobe.results import CellResult, Verdict

FINAL: Final = "verdict_final"
_LOOKAHEAD: Final = 64


def identity(v: Verdict | dict[str, Any]) -> tuple[Any, ...]:
    d = v.to_dict() if isinstance(v, Verdict) else v
    return (tuple(d.get("budgets") or ()), d.get("kind"), d.get("signature"), d.get("latent"),
            d.get("host"))


def final_verdicts(p: Planner, *, host: str | None = None) -> list[Verdict]:
    """The verdicts no remaining cell of the plan can change (see the module doc)."""
    pending = p.next_cells(_LOOKAHEAD)
    if any(c.purpose == "frontier" for c in pending):
        return []
    touched = {c.config.budget for c in pending}
    return [v for v in build_verdicts(p, host=host)
            if v.reason != "unfinished" and not touched & set(v.budgets)]


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
