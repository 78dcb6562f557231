"""`ddprobe sweep`: the full matrix of cells (budget x graph on/off [x max bs x backend]).

No decisions: every cell runs (identical hosts share them, hosts that differ each run the whole
matrix), and the result is a table of outcomes with acceptance length, tok/s, coding pass
counts and signatures. It is what a bisect's restart count is compared against.

With `--graph both` each graph cell is compared with its eager twin (the graph-vs-eager
differential). A divergence does not say which side is wrong, so one more cell decides it, as
the bisect's does (`ddprobe.bisect.agreement.side_cell`): eager with
--enable-deterministic-inference where the host's SGLang has it for the backend the cells ran
(read from its source, `ddprobe.sources.determinism`), else the eager cell repeated. Eager
disagreeing with it is nondeterminism: the graph cell keeps its own outcome, the divergence
reported as no evidence; eager agreeing leaves the graph cell `garbage`.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal

from ddprobe.bisect.agreement import COMPARE_MODE, AgreementOptions, compare_eager, side_cell
from ddprobe.bisect.cellrun import probe_options
from ddprobe.bisect.cells import PlannedCell, observe
from ddprobe.bisect.engine import Event, EventSink, GroupRun, drive, is_restart
from ddprobe.bisect.groups import HostGroup
from ddprobe.bisect.runframe import begin_run
from ddprobe.defaults import PROBE_CONCURRENCY
from ddprobe.errors import ConfigError, UsageError
from ddprobe.exitcodes import ExitCode
from ddprobe.inventory import Host
from ddprobe.probes import differential
from ddprobe.remote import RemoteOptions
from ddprobe.results import CellResult, Config, Outcome, Signature, UnknownValue, known
from ddprobe.runmodel import RunModel
from ddprobe.server.caches import RunCaches
from ddprobe.server.launch import deterministic_mode
from ddprobe.sources.determinism import FLAG, NONE, Determinism
from ddprobe.store import RunRecord

# eager first: a graph cell is then compared with its eager twin as soon as it finishes
GraphMode = Literal["both", "on", "off"]  # --graph: graph and eager cells, graph only, eager only
GRAPH_MODES: Final[dict[GraphMode, tuple[bool, ...]]] = {
    "both": (False, True), "on": (True,), "off": (False,)}


def graph_mode(value: str) -> GraphMode:
    """`--graph` (the flag, a playbook argument) as its vocabulary's value."""
    for mode in GRAPH_MODES:
        if value == mode:
            return mode
    raise UsageError(f"--graph must be both, on or off, got {value!r}")


@dataclass(frozen=True)
class SweepRequest:
    budgets: tuple[int, ...]
    graph: GraphMode = "both"
    max_bs: tuple[int | None, ...] = (None,)
    backends: tuple[str | None, ...] = (None,)
    extra_args: tuple[str, ...] = ()
    repeat: int = 1
    tasks: tuple[str, ...] = ()
    parallel: bool = True
    keep_server: bool = False
    concurrency: int = PROBE_CONCURRENCY  # probe tasks in flight at once (2 requests each)

    @classmethod
    def from_run(cls, rec: RunRecord) -> SweepRequest:
        """The request a sweep's journal header recorded (to resume it)."""
        o = rec.meta.get("options") or {}
        try:
            graph: GraphMode = known(GraphMode, o.get("graph", "both"), "run.options.graph")
        except UnknownValue as e:
            raise ConfigError(str(e), path=str(rec.dir / "journal.jsonl"), key=e.key) from None
        return cls(budgets=tuple(o["budgets"]), graph=graph,
                   max_bs=tuple(o.get("max_bs") or (None,)),
                   backends=tuple(o.get("backends") or (None,)),
                   extra_args=tuple(o.get("extra_args") or ()),
                   repeat=int(o.get("repeat") or 1), tasks=tuple(o.get("tasks") or ()),
                   parallel=bool(o.get("parallel", True)),
                   keep_server=bool(o.get("keep_server", False)),
                   concurrency=int(o.get("concurrency") or PROBE_CONCURRENCY))

    def validate(self) -> None:
        if not self.budgets or any(b <= 0 for b in self.budgets):
            raise UsageError("--budgets: give positive integers, e.g. 8,16,32")
        graph_mode(self.graph)  # a playbook's `${...}` argument is only known at run time
        if self.repeat < 1:
            raise UsageError("--repeat must be >= 1")

    def cells(self) -> list[PlannedCell]:
        out = []
        for b in sorted(set(self.budgets)):
            for g in GRAPH_MODES[self.graph]:
                for bs in self.max_bs:
                    for be in self.backends:
                        out.append(PlannedCell(Config(b, g, max_bs=bs, backend=be,
                                                      extra_args=self.extra_args), "sweep"))
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("budgets", "max_bs", "backends", "extra_args", "tasks"):
            d[k] = list(d[k])
        return d


class MatrixPlan:
    """Every cell once (x repeat), in order; k at a time."""

    label = "Sweep"  # the progress line's (engine.Plan)
    exact_count = True  # remaining() counts the cells not run yet

    def __init__(self, cells: Sequence[PlannedCell], repeat: int = 1,
                 deterministic: Determinism = NONE) -> None:
        self.cells = list(cells)
        self.repeat = repeat
        self.results: dict[str, list[CellResult]] = {}
        self.deterministic = deterministic  # the host's --enable-deterministic-inference
        self.sides: dict[str, tuple[str, str]] = {}  # side cell -> (graph cell, eager cell)

    def _due(self) -> list[PlannedCell]:
        out = []
        for c in self.cells:
            done = len(self.results.get(c.base_key, []))
            reps = 1 if c.mode == COMPARE_MODE else self.repeat  # a side cell: once
            out += [c.with_rep(r) for r in range(done + 1, reps + 1)]
        return out

    def next_cells(self, k: int = 1) -> list[PlannedCell]:
        return self._due()[:k]

    def record(self, cell: PlannedCell, result: CellResult) -> None:
        """A finished cell (run now or replayed from the journal): a divergence queues the cell
        that says which side is wrong, and that cell's answer settles the graph cell."""
        self.results.setdefault(cell.base_key, []).append(result)
        side = (result.differential or {}).get("side_cell") if cell.config.graph else None
        if isinstance(side, dict):
            sc = PlannedCell.from_dict(side)
            twin = replace(cell, config=replace(cell.config, graph=False), rep=1)
            self.sides[sc.base_key] = (cell.base_key, twin.base_key)
            if all(c.base_key != sc.base_key for c in self.cells):
                self.cells.append(sc)
        if cell.mode == COMPARE_MODE and cell.base_key in self.sides:
            self._settle(cell, result)

    def finish(self, cell: PlannedCell, result: CellResult) -> CellResult:
        """Before the journal: a graph cell against its eager twin (the graph-vs-eager
        differential; a decisive divergence makes it garbage, and, unless both ran with
        --enable-deterministic-inference, names the cell that says which side is wrong); that
        cell against the eager twin."""
        if cell.mode == COMPARE_MODE and cell.base_key in self.sides:
            return self._side_result(cell, result)
        if not cell.config.graph:
            return result
        twin = replace(cell, config=replace(cell.config, graph=False), rep=1)
        eager = next(iter(self.results.get(twin.base_key, [])), None)
        if eager is None or not eager.answers or not result.answers:
            return result
        before = {"outcome": result.outcome.value,
                  "signature": result.signature.to_dict() if result.signature else None}
        d = differential.apply(result, eager, backends=self._backends())
        if d.status == differential.DIVERGED and not all(
                FLAG in (c.launch or ()) for c in (result, eager)):
            opts = AgreementOptions(deterministic=self.deterministic,
                                    backend=differential.side_of(eager).backend)
            sc = side_cell(eager.config, opts)
            result.differential = {**(result.differential or {}), "before": before,
                                   "side_cell": sc.to_dict()}
            result.notes.append(f"which side is wrong: {sc.key} runs next ("
                                + ("eager with " + FLAG if opts.decides_deterministically
                                   else "the eager cell repeated: " +
                                   self.deterministic.why_not(opts.backend)) + ")")
        return result

    def _backends(self) -> tuple[str, ...] | None:
        """The host's deterministic backends for the differential (None: not read)."""
        det = self.deterministic
        return None if not det.known else det.backends if det.flag else ()

    def _side_result(self, cell: PlannedCell, result: CellResult) -> CellResult:
        """The side cell's answers against the eager twin's, recorded on the side cell."""
        graph_key, eager_key = self.sides[cell.base_key]
        eager = next(iter(self.results.get(eager_key, [])), None)
        if eager is None or not eager.answers or not result.answers or \
                result.outcome is not Outcome.OK:
            result.differential = {"graph_cell": graph_key, "eager_cell": eager_key,
                                   "status": differential.INCOMPARABLE, "summary":
                                   f"{cell.key} gave no answers to compare: which side of "
                                   "the divergence is wrong is not known"}
            return result
        same = compare_eager(eager, result)
        stable = same.status == differential.SAME
        what = ("eager is right and deterministic: the graph cell's divergence stands" if
                stable else "eager is not deterministic: the graph/eager divergence is no "
                "evidence of a defect")
        result.differential = {"graph_cell": graph_key, "eager_cell": eager_key,
                               "status": "stable" if stable else "nondeterministic",
                               "summary": f"{eager_key} vs {cell.key}: "
                                          f"{same.summary.split(': ', 1)[-1]}; {what}"}
        return result

    def _settle(self, cell: PlannedCell, result: CellResult) -> None:
        """Eager shown nondeterministic: its graph cell's own outcome back (in place)."""
        graph_key, _ = self.sides[cell.base_key]
        diff = result.differential or {}
        for g in self.results.get(graph_key, [])[:1]:
            before = (g.differential or {}).get("before")
            if diff.get("status") != "nondeterministic" or not isinstance(before, dict):
                continue
            sig = before.get("signature")
            g.outcome = Outcome(before["outcome"])
            g.signature = Signature(**sig) if isinstance(sig, dict) else None
            g.differential = {**(g.differential or {}), "status": differential.NOT_DECISIVE,
                              "note": diff.get("summary", "")}
            g.notes.append("not garbage: " + str(diff.get("summary", "")))

    def remaining(self) -> tuple[int, int]:
        n = len(self._due())
        return n, n


@dataclass
class MatrixRow:
    group: str
    budget: int
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)  # variant -> summary


def variant_name(c: Config) -> str:
    parts = ["graph" if c.graph else "eager"]
    if c.max_bs is not None:
        parts.append(f"bs{c.max_bs}")
    if c.backend:
        parts.append(c.backend)
    return " ".join(parts)


def summarize(results: Sequence[CellResult], repeat: int) -> dict[str, Any]:
    o = observe(results, repeat)
    c = o.first
    p = c.probes if c else None
    return {"status": o.status, "outcome": "flaky" if o.status == "flaky" else
            (c.outcome.value if c else "?"),
            "accept_length": p.accept_length if p else None, "tok_s": p.tok_s if p else None,
            "coding": f"{p.passed}/{p.total}" if p and p.total else None,
            "signature": c.signature.id if c and c.signature else None,
            "error": c.error if c else None, "repeats": [x.outcome.value for x in results]}


def run_sweep(hosts: Sequence[Host], req: SweepRequest, *, root: Path | None = None,
              resume: RunRecord | None = None, on_event: EventSink | None = None,
              break_lock: bool = False, argv: Sequence[str] = (),
              opts: RemoteOptions, caches: RunCaches | None = None) -> RunModel:
    """Run (or resume) a sweep; its model, read back from the journal, comes back (its end
    entry holds the table: `rows`, `variants`)."""
    req.validate()
    t0 = time.monotonic()
    frame = begin_run("sweep", hosts, root=root, resume=resume, on_event=on_event,
                      budgets=sorted(set(req.budgets)), options=req.to_dict(), argv=argv,
                      opts=opts, caches=caches)
    cells = req.cells()
    if resume is None:
        frame.journal.append({"type": "plan", "cells": [c.to_dict() for c in cells],
                              "note": f"full matrix: {len(cells)} cells per host group"})
    frame.start()
    with ExitStack() as stack:
        opened = frame.open_hosts(stack, hosts, parallel=req.parallel, break_lock=break_lock)
        runner = frame.cell_runner(probe=probe_options(req.tasks, concurrency=req.concurrency))
        plans = {g.key: MatrixPlan(cells, req.repeat, _determinism(opened.sessions, g))
                 for g in opened.groups}
        for g in opened.groups:
            frame.emit(Event("plan", g.name, f"sweep: {len(cells) * req.repeat} cells on "
                                             f"{len(g.hosts)} host(s)"))

        def go(g: HostGroup) -> Callable[[], GroupRun]:
            return lambda: drive(g, plans[g.key], opened.sessions, runner, frame.journal,
                                 on_event=on_event, record=resume)

        runs = frame.drive_groups(opened, [go(g) for g in opened.groups])
        if not req.keep_server:
            frame.stop_servers(opened.sessions, show=False)
    rows, variants, all_cells = _matrix(opened.groups, plans, cells, req.repeat)
    restarts = sum(1 for gr in runs for _, c in gr.cells if is_restart(c))
    errored = sum(1 for c in all_cells if c.outcome.value == "error")
    return frame.finish({"restarts_used": restarts, "restarts_full_sweep": restarts,
                         "exit_code": _exit_code(all_cells, errored),
                         "wall_s": round(time.monotonic() - t0, 3), "infra_errors": errored,
                         "variants": variants, "rows": [asdict(r) for r in rows],
                         "run_notes": list(opened.notes)})


def _determinism(sessions: dict[str, Any], g: HostGroup) -> Determinism:
    """The group's --enable-deterministic-inference (its first host's source; identical hosts
    share an install)."""
    s = sessions.get(g.hosts[0].name)
    if s is None:
        return NONE
    return deterministic_mode(s.r, s.host, cache=s.caches.flags)


def _exit_code(cells: Sequence[CellResult], errored: int) -> int:
    """5 when cells errored (incomplete; `--resume` runs them again), 1 when a cell failed,
    else 0."""
    if errored:
        return int(ExitCode.SERVER)
    return int(ExitCode.FAILED) if any(c.outcome.bad for c in cells) else 0


def _which_side(plan: MatrixPlan, results: Sequence[CellResult]) -> str:
    """What the cell that says which side of a graph cell's divergence is wrong showed."""
    side = (results[0].differential or {}).get("side_cell") if results else None
    if not isinstance(side, dict):
        return ""
    key = PlannedCell.from_dict(side).base_key
    got = plan.results.get(key, [])
    if not got:
        return f"{key} did not run: which side is wrong is not known"
    return str((got[0].differential or {}).get("summary", ""))


def _matrix(groups: Sequence[HostGroup], plans: dict[str, MatrixPlan],
            cells: Sequence[PlannedCell],
            repeat: int) -> tuple[list[MatrixRow], list[str], list[CellResult]]:
    """The table: one row per group and budget, one entry per variant (graph first)."""
    rows: list[MatrixRow] = []
    variants: list[str] = []
    all_cells: list[CellResult] = []
    for g in groups:
        by_budget: dict[int, MatrixRow] = {}
        plan = plans[g.key]
        for c in cells:
            res = plan.results.get(c.base_key, [])
            all_cells += res
            v = variant_name(c.config)
            if v not in variants:
                variants.append(v)
            row = by_budget.setdefault(c.config.budget, MatrixRow(g.name, c.config.budget))
            row.entries[v] = summarize(res, repeat)
            side = _which_side(plan, res)
            if side:
                row.entries[v]["which_side"] = side
        rows += [by_budget[b] for b in sorted(by_budget)]
    variants.sort(key=lambda v: v.split()[0] != "graph")  # shown graph first (run eager first)
    return rows, variants, all_cells
