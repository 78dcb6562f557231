"""`ddprobe bisect`: plan, run and judge a bisect over one or more hosts; resumable.

    model = run_bisect(hosts, BisectRequest(budgets=(8, 16, 32, 64)), on_event=print_event)

Identical hosts share the rounds (k-ary search); hosts that differ run the same plan side by
side and the report lists where their answers disagree. Every cell is journaled as it finishes
(`runs/<run-id>/journal.jsonl`), so `resume=RUN_ID` continues without repeating any. What the
run returns is its model read back from the journal (ddprobe/runmodel.py): the end entry holds
each group's rounds, restarts, suspects and final-verdict times besides the verdicts.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ddprobe.bisect.agreement import COMPARE_MODE, AgreementOptions
from ddprobe.bisect.agreement import which_side_line as agreement_side_line
from ddprobe.bisect.cellrun import CellRunner, probe_options
from ddprobe.bisect.cells import PlannedCell
from ddprobe.bisect.cheap import CheapSupport, host_support
from ddprobe.bisect.compare import disagreements
from ddprobe.bisect.costs import CostModel, host_history
from ddprobe.bisect.engine import Event, EventSink, GroupRun, drive, is_restart
from ddprobe.bisect.groups import HostGroup
from ddprobe.bisect.ladder import Order
from ddprobe.bisect.latent import LatentOptions
from ddprobe.bisect.planner import BisectSpec, Planner, PlanOptions, small_max_bs_for
from ddprobe.bisect.plantext import plan_lines
from ddprobe.bisect.preflight import PlanPreflight, plan_preflight
from ddprobe.bisect.runframe import RunFrame, begin_run, now
from ddprobe.bisect.session import HostSession, Opened, StaticEvidence, static_evidence
from ddprobe.bisect.streaming import VerdictStream, journaled
from ddprobe.bisect.verdicts import build_verdicts, exit_code, run_status
from ddprobe.defaults import OVERSIZE_FACTOR, PROBE_CONCURRENCY
from ddprobe.errors import ConfigError, UsageError
from ddprobe.inventory import Host
from ddprobe.remote import RemoteOptions
from ddprobe.results import CellResult, Config, UnknownValue, Verdict, known
from ddprobe.runmodel import RunModel
from ddprobe.server.caches import RunCaches
from ddprobe.sources.determinism import NONE as NO_DETERMINISM
from ddprobe.sources.determinism import Determinism
from ddprobe.sources.patches import apply_patch, load_patch
from ddprobe.store import RunRecord, find_run, load_run


@dataclass(frozen=True)
class BisectRequest:
    budgets: tuple[int, ...]
    max_bs: int | None = None
    backend: str | None = None
    extra_args: tuple[str, ...] = ()
    order: Order = "auto"
    repeat: int = 1
    sanitize: bool = False
    confirm_patch: str | None = None
    parallel: bool = True
    oversize_factor: int = OVERSIZE_FACTOR
    tasks: tuple[str, ...] = ()  # probe only these coding tasks (default: the whole suite)
    keep_server: bool = False  # leave the last cell's server running
    latent_check: bool = True  # memcheck passing graph budgets when a buffer is suspect
    context_len: int | None = None  # sizes buffers for grep-buffers (else the server's/model's)
    thorough: bool = False  # restart every budget
    cheap_cells: bool = True  # crash-or-not cells with dummy weights where the host allows
    compare: bool = True  # graph vs eager at the passing budgets kept (agreement.py)
    baseline: str | None = None  # a stored eager cell (`ddprobe run --json`): its answers
    concurrency: int = PROBE_CONCURRENCY  # probe tasks in flight at once (2 requests each)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["budgets"], d["extra_args"] = list(self.budgets), list(self.extra_args)
        d["tasks"] = list(self.tasks)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BisectRequest:
        kw = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        kw["budgets"] = tuple(int(b) for b in kw.get("budgets") or ())
        kw["extra_args"] = tuple(kw.get("extra_args") or ())
        kw["tasks"] = tuple(kw.get("tasks") or ())
        if "order" in kw:
            kw["order"] = known(Order, kw["order"], "run.options.order")
        return cls(**kw)

    def base(self) -> Config:
        return Config(budget=self.budgets[0] if self.budgets else 1, graph=True,
                      max_bs=self.max_bs, backend=self.backend, extra_args=self.extra_args)

    def agreement(self) -> AgreementOptions:
        """The comparison's options; the baseline's answers read from its file."""
        if not self.baseline:
            return AgreementOptions(enabled=self.compare)
        try:
            doc = json.loads(Path(self.baseline).read_text(encoding="utf-8"))
            cell = CellResult.from_dict(doc)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"not a cell from `ddprobe run --json` ({type(e).__name__}: "
                              f"{e})", path=self.baseline, key="--baseline") from None
        if not cell.answers:
            raise ConfigError("the baseline cell kept no answers (run it with --keep-answers)",
                              path=self.baseline, key="--baseline")
        return AgreementOptions(enabled=self.compare, baseline=dict(cell.answers),
                                baseline_key=cell.config.key)

    def spec(self, *, small_max_bs: int, suspects: Sequence[Any] = (),
             sanitize_available: bool = False, sanitize_note: str = "",
             latent: LatentOptions | None = None,
             cheap: CheapSupport | None = None, cost: CostModel | None = None,
             deterministic: Determinism = NO_DETERMINISM,
             backend: str | None = None) -> BisectSpec:
        """The planner's spec; `deterministic` (the host's --enable-deterministic-inference,
        from its source) and `backend` (the attention backend its cells run) decide how
        'which side of a divergence is wrong' is asked."""
        opts = PlanOptions(order=self.order, repeat=self.repeat, sanitize=self.sanitize,
                           sanitize_available=sanitize_available, sanitize_note=sanitize_note,
                           confirm_patch=self.confirm_patch,
                           oversize_factor=self.oversize_factor, thorough=self.thorough,
                           latent=latent or LatentOptions(enabled=self.latent_check),
                           cheap=cheap is not None and cheap.available,
                           cost=cost or CostModel(),
                           cheap_captured=cheap.captured() if cheap is not None else None,
                           agreement=replace(self.agreement(), deterministic=deterministic,
                                             backend=backend))
        return BisectSpec(tuple(self.budgets), self.base(), small_max_bs, tuple(suspects), opts)


@dataclass
class GroupOutcome:
    key: str
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
    # when each verdict became final (streaming.py): budgets, kind, after_cells, cells_s, ...
    finals: list[dict[str, Any]] = field(default_factory=list)


def load_resume(run_id: str, root: Path | None = None) -> RunRecord:
    rec = load_run(find_run(run_id, root))
    if rec.meta.get("command") != "bisect":
        raise UsageError(f"run {rec.run_id} is a {rec.meta.get('command') or '?'} run, not a "
                         "bisect; it cannot be resumed by bisect")
    if not rec.resumable:
        raise UsageError(f"run {rec.run_id} is already finished; see `ddprobe report "
                         f"{rec.run_id}` or `ddprobe bisect log {rec.run_id}`")
    return rec


def resume_request(rec: RunRecord) -> BisectRequest:
    """The options a resumed run was started with, from its journal's header."""
    try:
        return BisectRequest.from_dict(rec.meta.get("options") or {})
    except UnknownValue as e:
        raise ConfigError(str(e), path=str(rec.dir / "journal.jsonl"), key=e.key) from None


def run_bisect(hosts: Sequence[Host], req: BisectRequest, *, root: Path | None = None,
               resume: RunRecord | None = None, on_event: EventSink | None = None,
               break_lock: bool = False, argv: Sequence[str] = (),
               opts: RemoteOptions, caches: RunCaches | None = None) -> RunModel:
    """Run (or resume) a bisect; the journal and logs land in runs/<run-id>/; its model comes
    back (`report.write_reports` renders its files)."""
    t0 = time.monotonic()
    if resume is None:
        req.spec(small_max_bs=1)  # validates budgets/order/repeat before touching a host
    frame = begin_run("bisect", hosts, root=root, resume=resume, on_event=on_event,
                      budgets=req.budgets, options=req.to_dict(), argv=argv,
                      opts=opts, caches=caches)
    if resume is not None:
        frame.journal.note(f"resumed at {now()}")
    frame.start()
    with ExitStack() as stack:
        opened = frame.open_hosts(stack, hosts, parallel=req.parallel, break_lock=break_lock)
        runner = frame.cell_runner(probe=probe_options(req.tasks, concurrency=req.concurrency),
                                   oversize_factor=req.oversize_factor)
        groups = [_prepare_group(frame, req, opened, g, runner) for g in opened.groups]
        if resume is None:
            _journal_first_plan(frame, groups)
        for gp in groups:
            for line in plan_lines(gp.planner.spec, k=len(gp.group.hosts)):
                frame.emit(Event("plan", gp.group.name, line))
        seen = journaled(resume.dir / "journal.jsonl") if resume is not None else set()
        streams = {gp.group.key: _stream(frame, gp, seen, several=len(groups) > 1)
                   for gp in groups}

        def go(gp: _GroupPlan) -> Callable[[], GroupRun]:
            return lambda: drive(gp.group, gp.planner, opened.sessions, runner, frame.journal,
                                 on_event=on_event, record=resume, purpose_note=_why,
                                 after=streams[gp.group.key])

        runs = frame.drive_groups(opened, [go(gp) for gp in groups])
        outcomes = [_outcome(frame, req, opened.sessions, gp, gr,
                             several_groups=len(groups) > 1)
                    for gp, gr in zip(groups, runs, strict=True)]
        for o, gp in zip(outcomes, groups, strict=True):
            o.finals = [{"budgets": v.budgets, "kind": v.label, **when}
                        for v, when in streams[gp.group.key].order]
        if not req.keep_server:
            frame.stop_servers(opened.sessions)
        dis = disagreements(outcomes) if len(outcomes) > 1 else []
        for o in outcomes:
            for v in o.verdicts:
                frame.journal.append({"type": "verdict", **v.to_dict()})
        for d in dis:
            frame.journal.note("hosts disagree: " + d["text"])
        server_s = max((gr.cell_s for gr in runs), default=0.0)
        end = _end_entry(outcomes, dis, opened.notes, wall_s=time.monotonic() - t0,
                         server_s=server_s)
    return frame.finish(end)


@dataclass
class _GroupPlan:
    """One host group before it runs: its static evidence and its planner."""

    group: HostGroup
    static: StaticEvidence
    planner: Planner


def _prepare_group(frame: RunFrame, req: BisectRequest, opened: Opened, g: HostGroup,
                   runner: CellRunner) -> _GroupPlan:
    """Preflight, grep-buffers and the planner of one group (read on its first host)."""
    s0 = opened.sessions[g.hosts[0].name]
    pf = plan_preflight(s0.r, s0.host, budgets=req.budgets, base=req.base(), caches=s0.caches)
    for line in pf.lines():
        frame.journal.note(f"{g.name}: {line}")
        frame.emit(Event("plan", g.name, line))
    frame.journal.append({"type": "preflight", "group": g.key, **pf.to_dict()})
    eff_bs = req.max_bs or _served_max_bs(pf) or g.hosts[0].server.max_bs
    st = static_evidence(s0, budgets=req.budgets, max_bs=eff_bs, backend=req.backend,
                         factor=req.oversize_factor,
                         context_len=req.context_len or _context_len(pf),
                         topk=_same(pf, "topk") or s0.host.server.topk,
                         num_steps=_same(pf, "num_steps") or s0.host.server.steps,
                         effective_backend=_same(pf, "attention_backend"))
    if st.report is not None:
        runner.reports[g.key] = st.report
    for n in st.notes:
        frame.note(n, g.name)
    san_ok, san_note = _sanitize_support(req, opened.sessions, g)
    cheap = host_support(s0.r, s0.host, req.base(), max_bs=eff_bs,
                         concurrency=runner.probe.concurrency,
                         enabled=req.cheap_cells and req.repeat == 1, caches=s0.caches)
    runner.cheap[g.key] = cheap
    if cheap.available:
        frame.note("cheap cells: crash-or-not cells run first with "
                   f"{cheap.what(req.base())}" + (f" ({cheap.note})" if cheap.note else ""),
                   g.name)
    elif req.cheap_cells:
        frame.note(f"cheap cells: not used ({cheap.note})", g.name)
    cost = CostModel(host_history(frame.store.dir.parent, s0.host.name))
    backend = req.backend or _same(pf, "attention_backend")
    det = _determinism(s0, backend)
    planner = Planner(req.spec(small_max_bs=small_max_bs_for(eff_bs), suspects=st.suspects,
                               sanitize_available=san_ok, sanitize_note=san_note,
                               latent=_latent_support(req, opened.sessions, g),
                               cheap=cheap, cost=cost, deterministic=det, backend=backend))
    if req.compare:
        frame.note("which side of a divergence is wrong: " + agreement_side_line(
            planner.spec.options.agreement), g.name)
    frame.emit(Event("static", g.name, _static_line(st),
                     {"suspects": [s.to_dict() for s in st.suspects]}))
    return _GroupPlan(g, st, planner)


def _label(g: HostGroup, *, several: bool) -> str:
    """A group's verdicts' host label: a lone host's name, else the group's."""
    return g.name if several or len(g.hosts) > 1 else g.hosts[0].name


def _stream(frame: RunFrame, gp: _GroupPlan, seen: set[Any], *,
            several: bool) -> VerdictStream:
    """The group's verdicts, each announced (event, journal) the moment it is final."""
    def announce(v: Verdict, when: dict[str, Any]) -> None:
        where = ",".join(f"b{b}" for b in v.budgets) or "-"
        frame.emit(Event("verdict", gp.group.name,
                         f"final verdict: {where}: {v.label} ({v.decided_by}, {v.confidence} "
                         f"confidence) after {when['after_cells']} cell(s)",
                         {"verdict": v.to_dict(), "final": when}))

    return VerdictStream(gp.planner, host=_label(gp.group, several=several),
                         append=frame.journal.append, announce=announce, seen=seen)


def _journal_first_plan(frame: RunFrame, groups: Sequence[_GroupPlan]) -> None:
    """A fresh run's plan entry: every group's first cells and the first group's plan text."""
    first = [c.to_dict() for gp in groups for c in gp.planner.next_cells(len(gp.group.hosts))]
    g0 = groups[0]
    frame.journal.append({
        "type": "plan", "cells": first,
        "note": "\n".join(plan_lines(g0.planner.spec, k=len(g0.group.hosts))),
        "groups": {gp.group.key: {"name": gp.group.name,
                                  "hosts": [h.name for h in gp.group.hosts],
                                  "identity": gp.group.identity.to_dict()} for gp in groups}})


def _outcome(frame: RunFrame, req: BisectRequest, sessions: dict[str, HostSession],
             gp: _GroupPlan, gr: GroupRun, *, several_groups: bool) -> GroupOutcome:
    """One group's verdicts (a lone host's are labelled with its name) and counts."""
    g = gp.group
    verdicts = build_verdicts(gp.planner, host=_label(g, several=several_groups))
    kept = _keep_patch(frame, req, sessions, g, verdicts)
    return GroupOutcome(
        key=g.key, name=g.name, hosts=[h.name for h in g.hosts], identity=g.identity.to_dict(),
        verdicts=verdicts, rounds=gr.rounds,
        restarts=sum(1 for _, c in gr.cells if is_restart(c)),
        restarts_now=sum(1 for c in gr.new_cells if is_restart(c)),
        full_sweep=len(req.budgets) * 2 * req.repeat,
        suspects=[s.to_dict() for s in gp.static.suspects], cells=gr.cells,
        notes=list(gp.static.notes), patch_kept=kept)


def _end_entry(outcomes: Sequence[GroupOutcome], dis: list[dict[str, Any]], notes: list[str],
               *, wall_s: float, server_s: float) -> dict[str, Any]:
    """The journal's end entry: the counts, and per group what the model reads back."""
    verdicts = [v for o in outcomes for v in o.verdicts]
    return {"restarts_used": sum(o.restarts for o in outcomes),
            "restarts_this_invocation": sum(o.restarts_now for o in outcomes),
            "restarts_full_sweep": sum(o.full_sweep for o in outcomes),
            "rounds": max((o.rounds for o in outcomes), default=0),
            "status": run_status(verdicts),
            "infra_errors": sum(1 for o in outcomes for _, c in o.cells
                                if c.outcome.value == "error"),
            "exit_code": exit_code(verdicts), "wall_s": round(wall_s, 3),
            "disagreements": [d["text"] for d in dis],
            "server_s": round(server_s, 3), "disagreement_details": dis,
            "run_notes": list(notes),
            "groups": [{"key": o.key, "name": o.name, "hosts": o.hosts,
                        "identity": o.identity, "rounds": o.rounds, "restarts": o.restarts,
                        "restarts_this_invocation": o.restarts_now,
                        "restarts_full_sweep": o.full_sweep, "suspects": o.suspects,
                        "patch_kept": o.patch_kept, "notes": o.notes,
                        "verdicts_final": o.finals} for o in outcomes]}


def _served_max_bs(pf: PlanPreflight) -> int | None:
    """The max bs the host's SGLang says it will capture (the same at every budget)."""
    values = {e.max_captured_bs for e in pf.effective.values()} - {None}
    return values.pop() if len(values) == 1 else None


def _context_len(pf: PlanPreflight) -> int | None:
    n = _same(pf, "context_length")
    return n if isinstance(n, int) else None


def _same(pf: PlanPreflight, name: str) -> Any:
    """A value the server runs with at every budget of the plan, or None."""
    values = {getattr(e, name) for e in pf.effective.values()} - {None}
    return values.pop() if len(values) == 1 else None


def _why(c: PlannedCell) -> str:
    if c.mode == COMPARE_MODE:
        return "graph-vs-eager comparison"
    return {"frontier": "graph frontier", "eager": "eager control",
            "oversize": "oversize " + ",".join(c.buffers), "max_bs": "smaller max bs",
            "sanitize": "compute-sanitizer", "confirm": f"confirm {c.patch}",
            "residual": "the cure, real weights: what else fails"}.get(
        c.purpose, c.purpose)


def _static_line(st: StaticEvidence) -> str:
    if not st.suspects:
        return "grep-buffers: no captured buffer to suspect" + (
            f" ({st.notes[0]})" if st.notes else "")
    return "grep-buffers suspects: " + ", ".join(f"{s.attr} ({s.where})" for s in st.suspects)


def _sanitize_support(req: BisectRequest, sessions: dict[str, HostSession],
                      g: HostGroup) -> tuple[bool, str]:
    if not req.sanitize:
        return False, ""
    facts = sessions[g.hosts[0].name].facts
    if facts is None or not facts.compute_sanitizer:
        return False, f"no compute-sanitizer on {g.hosts[0].name}"
    return True, ""


def _determinism(s: HostSession, backend: str | None) -> Determinism:
    """The host's --enable-deterministic-inference, from the flags its source defines (the
    launch check reads them anyway: cached per run)."""
    from ddprobe.server.launch import host_flags
    flags, _ = host_flags(s.r, s.host, cache=s.caches.flags)
    return flags.deterministic if flags is not None else NO_DETERMINISM


def _latent_support(req: BisectRequest, sessions: dict[str, HostSession],
                    g: HostGroup) -> LatentOptions:
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
    return LatentOptions(enabled=True, available=True)


def _keep_patch(frame: RunFrame, req: BisectRequest, sessions: dict[str, HostSession],
                g: HostGroup, verdicts: list[Verdict]) -> bool | None:
    """--confirm-patch: keep the patch (re-apply it) when it fixed a failure mode."""
    if not req.confirm_patch:
        return None
    fixed = any(v.patch_confirmed for v in verdicts)
    if not fixed:
        frame.note(f"{req.confirm_patch}: did not fix any failure mode; reverted", g.name)
        return False
    patch = load_patch(req.confirm_patch)
    for h in g.hosts:
        s = sessions[h.name]
        apply_patch(s.r, patch, host=s.host)
    frame.note(f"{req.confirm_patch}: fixes a failure mode; kept applied on {g.name}", g.name)
    return True
