"""`ddprobe bisect`: plan, run and judge a bisect over one or more hosts; resumable.

    report = run_bisect(hosts, BisectRequest(budgets=(8, 16, 32, 64)), on_event=print_event)

Identical hosts share the rounds (k-ary search); hosts that differ run the same plan side by
side and the report lists where their answers disagree. Every cell is journaled as it finishes
(`runs/<run-id>/journal.jsonl`), so `resume=RUN_ID` continues without repeating any.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ddprobe import interrupt
from ddprobe.bisect.cells import PlannedCell
from ddprobe.bisect.compare import disagreements
from ddprobe.bisect.engine import (
    Event,
    EventSink,
    GroupRun,
    Journal,
    drive,
    in_parallel,
    is_restart,
    unfinished,
)
from ddprobe.bisect.executor import Executor, experiment_api, probe_options, stop_all, stop_server
from ddprobe.bisect.groups import HostGroup
from ddprobe.bisect.latent import LatentOptions
from ddprobe.bisect.planner import BisectSpec, Planner, PlanOptions, small_max_bs_for
from ddprobe.bisect.plantext import plan_lines
from ddprobe.bisect.preflight import PlanPreflight, plan_preflight
from ddprobe.bisect.session import StaticEvidence, open_hosts, static_evidence
from ddprobe.bisect.verdicts import build_verdicts, exit_code, run_status
from ddprobe.errors import HostGone, UsageError
from ddprobe.inventory import Host
from ddprobe.results import Config, Verdict
from ddprobe.sources.patches import apply_patch, load_patch
from ddprobe.store import RunRecord, RunStore, find_run, load_run, runs_root


@dataclass(frozen=True)
class BisectRequest:
    budgets: tuple[int, ...]
    max_bs: int | None = None
    backend: str | None = None
    extra_args: tuple[str, ...] = ()
    order: str = "auto"
    repeat: int = 1
    sanitize: bool = False
    confirm_patch: str | None = None
    parallel: bool = True
    oversize_factor: int = 4
    tasks: tuple[str, ...] = ()  # probe only these coding tasks (default: the whole suite)
    keep_server: bool = False  # leave the last cell's server running
    latent_check: bool = True  # memcheck passing graph budgets when a buffer is suspect
    context_len: int | None = None  # sizes buffers for grep-buffers (else the server's/model's)
    thorough: bool = False  # restart every budget

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["budgets"], d["extra_args"] = list(self.budgets), list(self.extra_args)
        d["tasks"] = list(self.tasks)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BisectRequest:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known["budgets"] = tuple(int(b) for b in known.get("budgets") or ())
        known["extra_args"] = tuple(known.get("extra_args") or ())
        known["tasks"] = tuple(known.get("tasks") or ())
        return cls(**known)

    def base(self) -> Config:
        return Config(budget=self.budgets[0] if self.budgets else 1, graph=True,
                      max_bs=self.max_bs, backend=self.backend, extra_args=self.extra_args)

    def spec(self, *, small_max_bs: int, suspects: Sequence[Any] = (),
             sanitize_available: bool = False, sanitize_note: str = "",
             latent: LatentOptions | None = None) -> BisectSpec:
        opts = PlanOptions(order=self.order, repeat=self.repeat, sanitize=self.sanitize,
                           sanitize_available=sanitize_available, sanitize_note=sanitize_note,
                           confirm_patch=self.confirm_patch,
                           oversize_factor=self.oversize_factor, thorough=self.thorough,
                           latent=latent or LatentOptions(enabled=self.latent_check))
        return BisectSpec(tuple(self.budgets), self.base(), small_max_bs, tuple(suspects), opts)


@dataclass
class GroupOutcome:
    name: str
    hosts: list[str]
    identity: dict[str, Any]
    verdicts: list[Verdict]
    rounds: int
    restarts: int  # every restart in the run (resumed cells included)
    restarts_now: int  # restarts made by this invocation
    full_sweep: int
    suspects: list[dict[str, Any]]
    cells: list[tuple[PlannedCell, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    patch_kept: bool | None = None


@dataclass
class BisectReport:
    run_id: str
    run_dir: Path
    budgets: tuple[int, ...]
    groups: list[GroupOutcome]
    disagreements: list[dict[str, Any]]
    notes: list[str]
    wall_s: float
    server_s: float  # time spent waiting on cells (the slowest per round, summed)
    status: str  # good | bad | skip

    @property
    def verdicts(self) -> list[Verdict]:
        return [v for g in self.groups for v in g.verdicts]

    @property
    def restarts_used(self) -> int:
        return sum(g.restarts for g in self.groups)

    @property
    def restarts_now(self) -> int:
        return sum(g.restarts_now for g in self.groups)

    @property
    def restarts_full_sweep(self) -> int:
        return sum(g.full_sweep for g in self.groups)

    @property
    def rounds(self) -> int:
        return max((g.rounds for g in self.groups), default=0)

    def exit_code(self, protocol: str | None = None) -> int:
        return exit_code(self.verdicts, protocol=protocol)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "run_dir": str(self.run_dir), "budgets": list(self.budgets),
            "status": self.status, "restarts_used": self.restarts_used,
            "restarts_this_invocation": self.restarts_now,
            "restarts_full_sweep": self.restarts_full_sweep, "rounds": self.rounds,
            "wall_s": round(self.wall_s, 3), "server_s": round(self.server_s, 3),
            "verdicts": [v.to_dict() for v in self.verdicts],
            "groups": [{"name": g.name, "hosts": g.hosts, "identity": g.identity,
                        "rounds": g.rounds, "restarts": g.restarts,
                        "restarts_full_sweep": g.full_sweep, "suspects": g.suspects,
                        "patch_kept": g.patch_kept, "notes": g.notes,
                        "cells": [{"key": pc.key, "purpose": pc.purpose, "host": c.host,
                                   "outcome": c.outcome.value} for pc, c in g.cells]}
                       for g in self.groups],
            "disagreements": self.disagreements, "notes": self.notes,
        }


def _command_tag(run_id: str) -> str:
    return f"ddprobe bisect (run {run_id})"


def load_resume(run_id: str, root: Path | None = None) -> RunRecord:
    rec = load_run(find_run(run_id, root))
    if rec.meta.get("command") != "bisect":
        raise UsageError(f"run {rec.run_id} is a {rec.meta.get('command') or '?'} run, not a "
                         "bisect; it cannot be resumed by bisect")
    if not rec.resumable:
        raise UsageError(f"run {rec.run_id} is already finished; see `ddprobe report "
                         f"{rec.run_id}` or `ddprobe bisect log {rec.run_id}`")
    return rec


def run_bisect(hosts: Sequence[Host], req: BisectRequest, *, root: Path | None = None,
               resume: RunRecord | None = None, on_event: EventSink | None = None,
               break_lock: bool = False, argv: Sequence[str] = (),
               executor: Executor | None = None) -> BisectReport:
    """Run (or resume) a bisect; the journal, logs and reports land in runs/<run-id>/."""
    t0 = time.monotonic()
    emit = on_event or (lambda e: None)
    if resume is not None:
        store = RunStore(resume.dir)
    else:
        req.spec(small_max_bs=1)  # validates budgets/order/repeat before touching a host
        store = RunStore.create("bisect", root or runs_root())
    journal = Journal(store)
    if resume is None:
        journal.append({"type": "run", "run_id": store.run_id, "command": "bisect",
                        "argv": list(argv), "hosts": [h.name for h in hosts],
                        "budgets": list(req.budgets),
                        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                        "options": req.to_dict()})
    else:
        journal.note(f"resumed at {time.strftime('%Y-%m-%dT%H:%M:%S')}")
    emit(Event("run", "", f"run {store.run_id} ({store.dir})", {"run_id": store.run_id}))
    interrupt.set_resume(f"ddprobe bisect --resume {store.run_id}")
    with ExitStack() as stack:
        try:
            opened = open_hosts(stack, hosts, command=_command_tag(store.run_id),
                                parallel=req.parallel, break_lock=break_lock)
        except BaseException as e:
            journal.abandon(fresh=resume is None, why=e)
            raise
        for n in opened.notes:
            journal.note(n)
            emit(Event("note", "", n))
        _, run_san, san_why = experiment_api()
        if executor is None:
            executor = Executor(run_dir=store.dir, oversize_factor=req.oversize_factor,
                                progress=lambda text: emit(Event("server", "", text)),
                                probe=probe_options(req.tasks),
                                on_note=lambda text: (journal.note(text),
                                                      emit(Event("note", "", text))))
        statics: dict[str, StaticEvidence] = {}
        planners: dict[str, Planner] = {}
        for g in opened.groups:
            s0 = opened.sessions[g.hosts[0].name]
            pf = plan_preflight(s0.r, s0.host, budgets=req.budgets, base=req.base())
            for line in pf.lines():
                journal.note(f"{g.name}: {line}")
                emit(Event("plan", g.name, line))
            journal.append({"type": "preflight", "group": g.key, **pf.to_dict()})
            eff_bs = req.max_bs or _served_max_bs(pf) or g.hosts[0].server.max_bs
            st = static_evidence(s0, budgets=req.budgets, max_bs=eff_bs, backend=req.backend,
                                 factor=req.oversize_factor,
                                 context_len=req.context_len or _context_len(pf),
                                 topk=_same(pf, "topk") or s0.host.server.topk,
                                 num_steps=_same(pf, "num_steps") or s0.host.server.steps)
            statics[g.key] = st
            if st.report is not None:
                executor.reports[g.key] = st.report
            for n in st.notes:
                journal.note(f"{g.name}: {n}")
                emit(Event("note", g.name, n))
            san_ok, san_note = _sanitize_support(req, opened.sessions, g, run_san, san_why)
            planners[g.key] = Planner(req.spec(small_max_bs=small_max_bs_for(eff_bs),
                                               suspects=st.suspects,
                                               sanitize_available=san_ok,
                                               sanitize_note=san_note,
                                               latent=_latent_support(req, opened.sessions, g,
                                                                      run_san, san_why)))
            emit(Event("static", g.name, _static_line(st),
                       {"suspects": [s.to_dict() for s in st.suspects]}))
        if resume is None:
            first = {g.key: [c.to_dict() for c in planners[g.key].next_cells(len(g.hosts))]
                     for g in opened.groups}
            journal.append({"type": "plan", "cells": [c for cs in first.values() for c in cs],
                            "note": "\n".join(plan_lines(planners[opened.groups[0].key].spec,
                                                         k=len(opened.groups[0].hosts))),
                            "groups": {g.key: {"name": g.name, "hosts": [h.name for h in g.hosts],
                                               "identity": g.identity.to_dict()}
                                       for g in opened.groups}})
        for g in opened.groups:
            for line in plan_lines(planners[g.key].spec, k=len(g.hosts)):
                emit(Event("plan", g.name, line))

        def go(g: HostGroup) -> GroupRun:
            return drive(g, planners[g.key], opened.sessions, executor, journal,
                         on_event=on_event, record=resume, purpose_note=_why)

        try:
            runs = in_parallel([lambda g=g: go(g) for g in opened.groups])
        except KeyboardInterrupt:
            stop_all(opened.sessions)
            raise
        except HostGone as e:
            raise unfinished(e, store.run_id, "bisect") from None
        outcomes: list[GroupOutcome] = []
        for g, gr in zip(opened.groups, runs):
            p = planners[g.key]
            label = g.name if len(opened.groups) > 1 or len(g.hosts) > 1 else g.hosts[0].name
            verdicts = build_verdicts(p, host=label)
            kept = _keep_patch(req, opened.sessions, g, verdicts, journal, emit)
            outcomes.append(GroupOutcome(
                name=g.name, hosts=[h.name for h in g.hosts], identity=g.identity.to_dict(),
                verdicts=verdicts, rounds=gr.rounds,
                restarts=sum(1 for _, c in gr.cells if is_restart(c)),
                restarts_now=sum(1 for c in gr.new_cells if is_restart(c)),
                full_sweep=len(req.budgets) * 2 * req.repeat,
                suspects=[s.to_dict() for s in statics[g.key].suspects], cells=gr.cells,
                notes=list(statics[g.key].notes), patch_kept=kept))
        if not req.keep_server:
            for sess in opened.sessions.values():
                msg = stop_server(sess)
                if msg:
                    journal.note(msg)
                    emit(Event("note", sess.host.name, msg))
        dis = disagreements(outcomes) if len(outcomes) > 1 else []
        for o in outcomes:
            for v in o.verdicts:
                journal.append({"type": "verdict", **v.to_dict()})
        for d in dis:
            journal.note("hosts disagree: " + d["text"])
        server_s = max((gr.cell_s for gr in runs), default=0.0)
        report = BisectReport(store.run_id, store.dir, tuple(req.budgets), outcomes, dis,
                              opened.notes, time.monotonic() - t0, server_s,
                              run_status([v for o in outcomes for v in o.verdicts]))
    journal.append({"type": "end", "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    "restarts_used": report.restarts_used,
                    "restarts_this_invocation": report.restarts_now,
                    "restarts_full_sweep": report.restarts_full_sweep,
                    "rounds": report.rounds, "status": report.status,
                    "infra_errors": sum(1 for o in outcomes for _, c in o.cells
                                        if c.outcome.value == "error"),
                    "exit_code": report.exit_code(), "wall_s": round(report.wall_s, 3),
                    "disagreements": [d["text"] for d in dis]})
    write_reports_if_available(store.dir, report.notes)
    return report


def write_reports_if_available(run_dir: Path, notes: list[str]) -> None:
    """The report engineer's renderer writes report.md/json/csv/html, when it is there."""
    try:
        from ddprobe.report import write_reports
    except ImportError:
        return
    try:
        write_reports(load_run(run_dir))
    except Exception as e:
        notes.append(f"reports not written: {type(e).__name__}: {e}")


def _served_max_bs(pf: PlanPreflight) -> int | None:
    """The max bs the host's SGLang says it will capture (the same at every budget)."""
    values = {e.max_captured_bs for e in pf.effective.values()} - {None}
    return values.pop() if len(values) == 1 else None


def _context_len(pf: PlanPreflight) -> int | None:
    return _same(pf, "context_length")


def _same(pf: PlanPreflight, name: str) -> int | None:
    """A value the server runs with at every budget of the plan, or None."""
    values = {getattr(e, name) for e in pf.effective.values()} - {None}
    return values.pop() if len(values) == 1 else None


def _why(c: PlannedCell) -> str:
    return {"frontier": "graph frontier", "eager": "eager control",
            "oversize": "oversize " + ",".join(c.buffers), "max_bs": "smaller max bs",
            "sanitize": "compute-sanitizer", "confirm": f"confirm {c.patch}"}.get(
        c.purpose, c.purpose)


def _static_line(st: StaticEvidence) -> str:
    if not st.suspects:
        return "grep-buffers: no captured buffer to suspect" + (
            f" ({st.notes[0]})" if st.notes else "")
    return "grep-buffers suspects: " + ", ".join(f"{s.attr} ({s.where})" for s in st.suspects)


def _sanitize_support(req: BisectRequest, sessions: dict[str, Any], g: HostGroup,
                      run_san: Any, why: str) -> tuple[bool, str]:
    if not req.sanitize:
        return False, ""
    facts = sessions[g.hosts[0].name].facts
    if facts is None or not facts.compute_sanitizer:
        return False, f"no compute-sanitizer on {g.hosts[0].name}"
    if run_san is None:
        return False, why or "no sanitize cell in ddprobe.cell.experiment"
    return True, ""


def _latent_support(req: BisectRequest, sessions: dict[str, Any], g: HostGroup,
                    run_san: Any, why: str) -> LatentOptions:
    """The latent check runs with --sanitize, and by default where the host's facts show
    compute-sanitizer; --no-latent-check turns it off."""
    if not req.latent_check:
        return LatentOptions(enabled=False, note="--no-latent-check")
    h = g.hosts[0]
    facts = sessions[h.name].facts
    if facts is None or not facts.compute_sanitizer:
        return LatentOptions(enabled=True, available=False,
                             note=f"no compute-sanitizer on {h.name}")
    if h.server.manager != "command":
        return LatentOptions(enabled=True, available=False,
                             note=f"sanitize cells need the command manager ({h.name} uses "
                                  f"{h.server.manager})")
    if run_san is None:
        return LatentOptions(enabled=True, available=False,
                             note=why or "no sanitize cell in ddprobe.cell.experiment")
    return LatentOptions(enabled=True, available=True)


def _keep_patch(req: BisectRequest, sessions: dict[str, Any], g: HostGroup,
                verdicts: list[Verdict], journal: Journal, emit: EventSink) -> bool | None:
    """--confirm-patch: keep the patch (re-apply it) when it fixed a failure mode."""
    if not req.confirm_patch:
        return None
    fixed = any(v.patch_confirmed for v in verdicts)
    if not fixed:
        msg = f"{req.confirm_patch}: did not fix any failure mode; reverted"
        journal.note(f"{g.name}: {msg}")
        emit(Event("note", g.name, msg))
        return False
    patch = load_patch(req.confirm_patch)
    for h in g.hosts:
        s = sessions[h.name]
        apply_patch(s.r, patch, host=s.host)
    msg = f"{req.confirm_patch}: fixes a failure mode; kept applied on {g.name}"
    journal.note(f"{g.name}: {msg}")
    emit(Event("note", g.name, msg))
    return True

