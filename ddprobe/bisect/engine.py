"""Driving a plan over hosts: rounds of cells, one per host, journaled, resumable.

`drive(group, plan, ...)` is shared by bisect and sweep: it asks the plan for up to k cells
(k = the group's hosts), runs them in parallel (one per host), writes each result to the run's
journal as it arrives, and repeats until the plan has nothing left. A resumed run feeds the
journal's cells back into the plan first, so finished cells are never repeated.
"""
from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from ddprobe import interrupt
from ddprobe.bisect.cellrun import CellRunner
from ddprobe.bisect.cells import PlannedCell, describe
from ddprobe.bisect.groups import HostGroup
from ddprobe.bisect.session import HostSession
from ddprobe.errors import ConfigError, HostGone
from ddprobe.results import CellResult, UnknownValue
from ddprobe.store import RunRecord, RunStore


class Plan(Protocol):
    def next_cells(self, k: int = 1) -> list[PlannedCell]: ...

    def record(self, cell: PlannedCell, result: CellResult) -> None: ...

    def remaining(self) -> tuple[int, int]: ...

    # the progress line's label, and whether remaining() is exact (a sweep's matrix) or the
    # worst case of the plan (a bisect's)
    label: str
    exact_count: bool


# run: the run dir; server: a server's progress; plan, static: the plan and its evidence;
# round, cell_start, cell_done, progress: the rounds; note: anything else a reader should know
# verdict: a verdict that just became final (streaming.py)
EventKind = Literal["run", "server", "plan", "static", "round", "cell_start", "cell_done",
                    "progress", "note", "verdict"]


@dataclass(frozen=True)
class Event:
    """Progress for the CLI (rendered on stderr)."""

    kind: EventKind
    group: str
    text: str
    data: dict[str, Any] = field(default_factory=dict)


    def to_record(self) -> dict[str, Any]:
        """The event as one JSON object of an event stream (`bisect --events`): `type` is the
        kind; a verdict is its journal line (`verdict_final`: the verdict's fields and
        `final`); a finished cell is summed up (the journal holds all of it)."""
        if self.kind == "verdict":
            return {"type": "verdict_final", "group": self.group,
                    **(self.data.get("verdict") or {}), "final": self.data.get("final")}
        rec: dict[str, Any] = {"type": self.kind, "group": self.group, "text": self.text}
        for k, v in self.data.items():
            rec[k] = _cell_summary(v) if isinstance(v, CellResult) else v
        return rec


def _cell_summary(c: CellResult) -> dict[str, Any]:
    return {"key": c.config.key, "host": c.host, "outcome": c.outcome.value,
            "signature": c.signature.id if c.signature else None,
            "cheap": bool(c.cheap), "wall_s": c.wall_s, "describe": describe(c),
            "phases": c.phases}


EventSink = Callable[[Event], None]


class Journal:
    """The run store, shared by threads: one line per event, never interleaved."""

    def __init__(self, store: RunStore | None) -> None:
        self.store = store
        self._lock = threading.Lock()

    def append(self, event: dict[str, Any]) -> None:
        if self.store is not None:
            with self._lock:
                self.store.append(event)

    def cell(self, c: CellResult) -> None:
        self.append({"type": "cell", **c.to_dict()})

    def note(self, text: str) -> None:
        self.append({"type": "note", "text": text})

    def abandon(self, *, fresh: bool, why: BaseException) -> None:
        """The hosts could not be opened (one is locked, Ctrl-C): nothing ran. A fresh run
        leaves no directory behind (so `report latest` does not offer to resume a run that
        never started); a resumed one keeps its journal, unfinished, with a note why."""
        if self.store is None:
            return
        if fresh:
            shutil.rmtree(self.store.dir, ignore_errors=True)
            interrupt.clear_resume()  # nothing to resume: the run never started
        else:
            self.note(f"resume stopped before any cell: {why or type(why).__name__}")


@dataclass
class GroupRun:
    """What happened in one group: its rounds and cells (resumed cells included)."""

    group: HostGroup
    rounds: int = 0
    cells: list[tuple[PlannedCell, CellResult]] = field(default_factory=list)
    resumed: int = 0
    wall_s: float = 0.0
    cell_s: float = 0.0  # sum over rounds of the slowest cell: time spent waiting on servers
    notes: list[str] = field(default_factory=list)

    @property
    def new_cells(self) -> list[CellResult]:
        return [c for _, c in self.cells[self.resumed:]]


def is_restart(c: CellResult) -> bool:
    """Did this cell restart the server? (a refused config or a skipped patch does not)."""
    if c.outcome.value == "refused":
        return False
    if c.outcome.value == "error":
        return c.timings.get("restart") is not None
    return True


def replay_journal(plan: Plan, record: RunRecord | None, group_key: str,
                   run: GroupRun) -> None:
    """Feed a resumed run's finished cells of this group back into the plan (all but the
    `error` ones: an infrastructure error says nothing about the config, so it runs again)."""
    if record is None:
        return
    for c in record.cells:
        meta = c.plan
        if c.group != group_key or not isinstance(meta, dict):
            continue
        if c.outcome.value == "error":
            # infrastructure (a drop, a full disk, a busy port) is never final: run it again
            continue
        try:
            pc = PlannedCell.from_dict(meta)
        except UnknownValue as e:
            raise ConfigError(str(e), path=str(record.dir / "journal.jsonl"),
                              key=e.key) from None
        plan.record(pc, c)
        run.cells.append((pc, c))
        run.rounds = max(run.rounds, int(c.round or 0))
    run.resumed = len(run.cells)


def _progress(plan: Plan, group: str) -> Event:
    """The "restarts left" event (one restart per cell, as the plan's "restarts:" line counts
    them): exact for a sweep's matrix, the worst case of the plan for a bisect."""
    left, restarts = plan.remaining()
    count = f"{restarts} restart{'' if restarts == 1 else 's'} left"
    return Event("progress", group,
                 count if plan.exact_count else f"at most {count} (worst case of the plan)",
                 {"configs_left": left, "restarts_left": restarts, "label": plan.label})


def drive(group: HostGroup, plan: Plan, sessions: dict[str, HostSession], runner: CellRunner,
          journal: Journal, *, on_event: EventSink | None = None, record: RunRecord | None = None,
          purpose_note: Callable[[PlannedCell], str] | None = None,
          after: Callable[[PlannedCell, CellResult], None] | None = None) -> GroupRun:
    run = GroupRun(group)
    replay_journal(plan, record, group.key, run)
    emit = on_event or (lambda e: None)
    if run.resumed:
        emit(Event("note", group.name, f"resumed: {run.resumed} finished cell(s) not repeated"))
    hosts = [sessions[h.name] for h in group.hosts if h.name in sessions]
    t_start = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, len(hosts)),
                            thread_name_prefix=f"ddprobe-{group.key}") as pool:
        while True:
            cells = plan.next_cells(len(hosts))
            if not cells:
                break
            emit(_progress(plan, group.name))
            run.rounds += 1
            emit(Event("round", group.name, f"round {run.rounds}: " + ", ".join(
                c.key for c in cells), {"round": run.rounds, "cells": [c.key for c in cells]}))
            futures: list[tuple[PlannedCell, HostSession, Any]] = []
            for cell, s in zip(cells, hosts, strict=False):
                why = purpose_note(cell) if purpose_note else cell.purpose
                emit(Event("cell_start", group.name, f"{s.host.name}: {cell.key} ({why})",
                           {"host": s.host.name, "cell": cell.key}))
                if len(cells) == 1:
                    # run in this thread: Ctrl-C then reaches the cell (which stops its server
                    # and reverts its patch) instead of waiting for it to finish
                    futures.append((cell, s, _Done(runner.run(s, cell, group=group.key))))
                else:
                    futures.append((cell, s, pool.submit(runner.run, s, cell,
                                                         group=group.key)))
            slowest = 0.0
            gone: BaseException | None = None
            for cell, s, fut in futures:
                try:
                    res = fut.result()
                except HostGone as e:  # journal the round's other cells, then stop the run
                    gone = gone or e
                    continue
                res = replace(res, plan=cell.to_dict(), group=group.key, round=run.rounds,
                              purpose=cell.purpose)
                finish = getattr(plan, "finish", None)  # e.g. the sweep's differential
                if finish is not None:
                    res = finish(cell, res)
                journal.cell(res)
                plan.record(cell, res)
                run.cells.append((cell, res))
                slowest = max(slowest, float(res.wall_s or 0.0))
                emit(Event("cell_done", group.name, f"{s.host.name}: {cell.key}", {
                    "host": s.host.name, "cell": cell.key, "result": res}))
                if after is not None:  # e.g. the verdicts that just became final
                    after(cell, res)
            run.cell_s += slowest
            if gone is not None:
                raise gone
    run.wall_s = time.monotonic() - t_start
    return run


class _Done:
    """A finished result with a Future's `result()`."""

    def __init__(self, value: CellResult) -> None:
        self.value = value

    def result(self) -> CellResult:
        return self.value


def unfinished(e: HostGone, run_id: str, command: str) -> HostGone:
    """The message a run that lost its host stops with: what happened and how to go on."""
    return HostGone(f"{e}. Run {run_id} stops unfinished (nothing seen through the dropped "
                    f"connection was recorded as a result); when the host is back: "
                    f"`ddprobe {command} --resume {run_id}`")


def in_parallel(fns: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run a few callables at once (the groups of a run); exceptions propagate."""
    if len(fns) == 1:
        return [fns[0]()]
    with ThreadPoolExecutor(max_workers=len(fns), thread_name_prefix="ddprobe-group") as pool:
        futs = [pool.submit(f) for f in fns]
        return [f.result() for f in futs]
