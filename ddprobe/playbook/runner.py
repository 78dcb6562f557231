"""Run a checked playbook on one host: steps in order, conditions, asserts, patch safety.

A failing step stops the playbook, and every patch the playbook applied is reverted (newest
first) unless `keep_patches`; the same happens on Ctrl-C before the interrupt goes on up.
Progress goes to an `on_event` callback: this module prints nothing.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddprobe.errors import ConfigError, DdprobeError
from ddprobe.exitcodes import ExitCode
from ddprobe.inventory import Host
from ddprobe.playbook import expr
from ddprobe.playbook.actions import ActionResult, coerce, to_plain
from ddprobe.playbook.builtin import StepFailed
from ddprobe.playbook.context import StepContext
from ddprobe.playbook.schema import Playbook, StepSpec, Template
from ddprobe.remote import RemoteOptions
from ddprobe.report import write_reports
from ddprobe.runmodel import load_model
from ddprobe.server.caches import RunCaches
from ddprobe.sources.patches import revert_patch
from ddprobe.store import RunStore, load_run, runs_root
from ddprobe.timestamps import utc_stamp


@dataclass(frozen=True)
class StepEvent:
    kind: str  # start | progress | ok | skip | fail | ignored | revert | revert-failed
    step: StepSpec | None
    message: str = ""
    elapsed_s: float | None = None


@dataclass(frozen=True)
class StepOutcome:
    index: int
    name: str
    action: str
    status: str  # ok | skipped | failed | ignored | not-run
    summary: str = ""
    elapsed_s: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PlaybookResult:
    playbook: str
    host: str
    status: str  # ok | failed
    steps: tuple[StepOutcome, ...]
    exit_code: int
    error: str | None = None
    failed_step: int | None = None
    reverted: tuple[str, ...] = ()  # patches reverted because a step failed
    kept: tuple[str, ...] = ()  # patches the playbook applied that are still applied
    revert_errors: tuple[str, ...] = ()
    run_id: str | None = None
    run_dir: Path | None = None
    results: dict[str, Any] = field(default_factory=dict, repr=False)  # registered data

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return {"playbook": self.playbook, "host": self.host, "status": self.status,
                "exit_code": self.exit_code, "error": self.error,
                "failed_step": self.failed_step, "reverted": list(self.reverted),
                "kept": list(self.kept), "revert_errors": list(self.revert_errors),
                "run_id": self.run_id, "run_dir": str(self.run_dir) if self.run_dir else None,
                "steps": [s.to_dict() for s in self.steps]}


def _args(step: StepSpec, scope: dict[str, Any], path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in step.args.items():
        if isinstance(v, Template):
            try:
                v = coerce(v.kind, v.render(scope))
            except (expr.ExprError, ValueError) as e:
                raise ConfigError(f"argument '{k}' = {v.text}: {e}", path=path,
                                  line=v.line) from None
        out[k] = v
    return out


def _holds(step: StepSpec, node: expr.Node, text: str, scope: dict[str, Any], path: str,
           what: str) -> bool:
    try:
        return bool(expr.evaluate(node, scope))
    except expr.ExprError as e:
        raise ConfigError(f"{what} {text!r}: {e}", path=path, line=step.line) from None


def run_playbook(pb: Playbook, host: Host, *, opts: RemoteOptions,
                 caches: RunCaches | None = None, keep_patches: bool = False,
                 on_event: Callable[[StepEvent], None] | None = None,
                 runs_dir: Path | None = None) -> PlaybookResult:
    """Run every step of `pb` on `host` (reached with `opts`); never raises for a failing
    step (see the result). `caches`: the run's (a fresh one when none is given)."""
    emit = on_event or (lambda e: None)
    root = runs_dir or runs_root()
    store = _create_store(pb, host, root)
    ctx = StepContext(host, store, opts=opts, caches=caches, runs_root=root)
    run = _Run(pb, ctx, store, emit, {**pb.builtins, **pb.vars})
    error, failed, interrupted = run.all_steps()
    try:
        reverted, rerrs = ([], []) if (error is None or keep_patches) else _revert(ctx, emit)
    finally:
        ctx.close()
    done = {o.index for o in run.outcomes}
    outcomes = run.outcomes + [StepOutcome(s.index, s.name, s.action, "not-run")
                               for s in pb.steps if s.index not in done]
    result = PlaybookResult(
        pb.name, host.name, "ok" if error is None else "failed", tuple(outcomes),
        _exit_code(error, interrupted, rerrs), str(error) if error else None,
        failed.index if failed else None, tuple(reverted),
        tuple(pid for pid, _ in ctx.applied), tuple(rerrs), store.run_id, store.dir,
        {k: v for k, v in run.scope.items() if k not in pb.vars and k not in pb.builtins})
    store.append({"type": "end", "finished_at": utc_stamp(),
                  "restarts_used": load_run(store.dir).restarts_used,
                  "restarts_full_sweep": None, "exit_code": result.exit_code,
                  "status": result.status, "reverted": list(reverted), "kept": list(result.kept)})
    _render_again(ctx)
    if interrupted is not None:
        raise interrupted
    return result


def _create_store(pb: Playbook, host: Host, root: Path) -> RunStore:
    """The playbook's own run directory, its header journaled."""
    try:
        store = RunStore.create("playbook", root)
    except OSError as e:
        raise DdprobeError(f"cannot create a run directory under {root}: "
                           f"{e.strerror or e}") from None
    store.append({"type": "run", "run_id": store.run_id, "command": "playbook",
                  "playbook": pb.path, "name": pb.name, "hosts": [host.name],
                  "budgets": _budgets(pb), "argv": [], "options": {"vars": to_plain(pb.vars)},
                  "started_at": utc_stamp()})
    return store


def _exit_code(error: DdprobeError | None, interrupted: KeyboardInterrupt | None,
               revert_errors: list[str]) -> int:
    if interrupted is not None:
        return int(ExitCode.INTERRUPTED)
    if revert_errors:
        return int(ExitCode.PATCH)  # a patch left behind outranks the step's own failure
    return int(ExitCode.OK if error is None else error.exit_code)


@dataclass
class _Run:
    """The steps of one playbook run: their outcomes, journaled and emitted as they end."""

    pb: Playbook
    ctx: StepContext
    store: RunStore
    emit: Callable[[StepEvent], None]
    scope: dict[str, Any]
    outcomes: list[StepOutcome] = field(default_factory=list)
    t0: float = 0.0  # when the current step started

    def all_steps(self) -> tuple[DdprobeError | None, StepSpec | None,
                                 KeyboardInterrupt | None]:
        """Run the steps in order: (the error that stopped them, its step, a Ctrl-C)."""
        current: StepSpec | None = None
        try:
            for step in self.pb.steps:
                current, self.t0 = step, time.monotonic()
                error = self.one(step)
                if error is not None:
                    return error, step, None
        except KeyboardInterrupt as e:
            if current is not None:
                self.record(StepOutcome(current.index, current.name, current.action, "failed",
                                        elapsed_s=self.elapsed(), error="interrupted"),
                            "fail", current, "interrupted")
            return DdprobeError("interrupted"), current, e
        return None, None, None

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def record(self, out: StepOutcome, kind: str, step: StepSpec, message: str) -> None:
        self.outcomes.append(out)
        _journal(self.store, out)
        self.emit(StepEvent(kind, step, message, None if kind == "skip" else out.elapsed_s))

    def one(self, step: StepSpec) -> DdprobeError | None:
        """Run one step; the error that stops the playbook, or None."""
        try:
            if step.when_node is not None and not _holds(
                    step, step.when_node, step.when or "", self.scope, self.pb.path, "when"):
                self.skip(step)
                return None
            self.emit(StepEvent("start", step))
            self.ctx.progress = self.progress_of(step)
            res = _run_step(step, self.ctx, self.scope, self.pb.path)
        except DdprobeError as e:
            return self.failed(step, e)
        self.record(StepOutcome(step.index, step.name, step.action, "ok", res.summary,
                                self.elapsed()), "ok", step, res.summary)
        return None

    def progress_of(self, step: StepSpec) -> Callable[[str], None]:
        return lambda text: self.emit(StepEvent("progress", step, text))

    def skip(self, step: StepSpec) -> None:
        if step.register:
            self.scope[step.register] = None  # a skipped step's result reads as null
        out = StepOutcome(step.index, step.name, step.action, "skipped",
                          f"when {step.when} is false")
        self.record(out, "skip", step, out.summary)

    def failed(self, step: StepSpec, e: DdprobeError) -> DdprobeError | None:
        """A step raised: journal it; the error unless the step ignores errors."""
        status = "ignored" if step.ignore_errors else "failed"
        self.record(StepOutcome(step.index, step.name, step.action, status,
                                elapsed_s=self.elapsed(), error=str(e)),
                    "ignored" if step.ignore_errors else "fail", step, str(e))
        if not step.ignore_errors:
            return e
        if step.register:
            self.scope[step.register] = None
        return None


def _run_step(step: StepSpec, ctx: StepContext, scope: dict[str, Any], path: str
              ) -> ActionResult:
    args = _args(step, scope, path)
    try:
        res = step.spec.run(ctx, args)
    except DdprobeError:
        raise
    except Exception as e:
        err = DdprobeError(f"{step.action} failed: {type(e).__name__}: {e}")
        err.exit_code = ExitCode.INTERNAL
        raise err from e
    if step.register:
        scope[step.register] = res.data
    own = {**scope, "result": res.data}
    for text, node in step.asserts:
        if not _holds(step, node, text, own, path, "assert"):
            raise StepFailed(f"assert failed: {text}")
    return res


def _revert(ctx: StepContext, emit: Callable[[StepEvent], None]) -> tuple[list[str], list[str]]:
    """Revert, newest first, what this playbook applied; keep going past a failed revert."""
    done: list[str] = []
    errors: list[str] = []
    for pid, patch in reversed(list(ctx.applied)):
        try:
            revert_patch(ctx.remote(), pid, host=ctx.host)
        except Exception as e:
            errors.append(f"{pid}: {e}")
            emit(StepEvent("revert-failed", None, f"{pid}: {e}"))
            continue
        done.append(pid)
        ctx.applied.remove((pid, patch))
        emit(StepEvent("revert", None, pid))
    if ctx.store is not None:
        for pid in done:
            ctx.store.append({"type": "note", "text": f"reverted patch {pid} (a step failed)"})
    return done, errors


def _journal(store: RunStore, out: StepOutcome) -> None:
    store.append({"type": "step", **out.to_dict()})
    text = f"step {out.index} {out.name} ({out.action}): {out.status}"
    if out.summary:
        text += f": {out.summary}"
    if out.error:
        text += f": {out.error}"
    store.append({"type": "note", "text": text})


def _budgets(pb: Playbook) -> list[int]:
    """The playbook's `budgets` variable, if it has one (the report lists them)."""
    try:
        return coerce("ints", pb.vars.get("budgets")) or []
    except ValueError:
        return []


def _render_again(ctx: StepContext) -> None:
    """Report steps ran before the end was journaled: render those runs once more."""
    for d in sorted(ctx.report_targets):
        try:
            write_reports(load_model(d))
        except DdprobeError:
            continue
