"""The built-in playbook actions: thin adapters from a step's arguments to library calls.

Each adapter calls the library function it imports, and returns plain data (for `register:`
and conditions) plus a one-line summary. `campaign_action` is the one binding by name: an
extension action that names its function as "module:function" (see `actions.resolve`).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ddprobe.bisect.run import BisectRequest, run_bisect
from ddprobe.bisect.sweep import GRAPH_MODES, SweepRequest, run_sweep
from ddprobe.cell.experiment import ProbeOptions, run_cell
from ddprobe.errors import ConfigError, DdprobeError
from ddprobe.facts import gather_facts
from ddprobe.playbook.actions import (
    ActionRegistry,
    ActionResult,
    ActionSpec,
    Arg,
    bind_call,
    resolve,
    to_plain,
)
from ddprobe.playbook.context import StepContext
from ddprobe.probes.runner import run_probes
from ddprobe.report import write_reports
from ddprobe.report.junit import junit_xml
from ddprobe.report.resolve import resolve_run
from ddprobe.report.write import write_run_reports
from ddprobe.results import CellResult, Config
from ddprobe.runmodel import load_model
from ddprobe.smoke import SmokeRequest, run_smoke
from ddprobe.sources.buffers import SizingParams
from ddprobe.sources.fetch import grep_buffers, read_flags
from ddprobe.sources.grep import grep
from ddprobe.sources.patches import apply_patch, load_patch, patch_status, revert_patch
from ddprobe.store import RunRecord, load_run

# The names a function bound by `campaign_action` may also use for what a step provides.
_HOST_ALIASES = {"host": ("h",), "remote": ("r", "conn", "connection"),
                 "config": ("cfg",), "hosts": ("host_list",), "store": ("run_store",),
                 "request": ("req",), "runs_root": ("root",)}


class StepFailed(DdprobeError):
    """A step failed on purpose (`fail` action or an `assert:` that did not hold)."""


def _given(**kw: Any) -> dict[str, Any]:
    """The step arguments that were given (None means: the callee's default)."""
    return {k: v for k, v in kw.items() if v is not None}


def _facts(ctx: StepContext, a: dict[str, Any]) -> ActionResult:
    d = to_plain(gather_facts(ctx.remote(), ctx.host))
    gpus = d.get("gpus") or []
    inst = d.get("install") or {}
    py = (d.get("python") or {}).get("version", "?")
    gpu = f"{len(gpus)} x {gpus[0].get('name', '?')}" if gpus else "no GPU"
    return ActionResult(d, f"{gpu}; python {py}; {inst.get('name', ctx.host.package)} "
                           f"{inst.get('version', 'not installed')}")


def _grep(ctx: StepContext, a: dict[str, Any]) -> ActionResult:
    res = grep(ctx.remote(), a["pattern"], host=ctx.host, subdir=a["path"],
               context=a["context"], fixed=a["fixed"], ignore_case=a["ignore_case"])
    d = to_plain(res)
    matches = [h for h in d.get("hits", []) if h.get("kind") == "match"]
    d["matches"] = matches
    d["count"] = len(matches)
    files = sorted({h["file"] for h in matches})
    return ActionResult(d, f"{len(matches)} match(es) in {len(files)} file(s)"
                           + (f": {', '.join(files[:3])}" if files else ""))


def _grep_buffers(ctx: StepContext, a: dict[str, Any]) -> ActionResult:
    s = ctx.host.server
    budgets = tuple(a["budgets"] or ([s.budget] if s.budget else []))
    params = SizingParams(max_bs=a["max_bs"] or s.max_bs, budgets=budgets,
                          context_len=a["context_len"])
    rep = grep_buffers(ctx.remote(), ctx.host, backend=a["backend"], params=params,
                       include_per_batch=a["include_per_batch"])
    d = to_plain(rep)
    rows = [r for r in d.get("rows", []) if r.get("status") == "found"]
    flagged = [{"attr": r["attr"], "file": r["file"], "line": r["line"], "flags": r["flags"],
                "shape": r["shape"], "phase": r["phase"]} for r in rows if r.get("flags")]
    d["flagged"] = flagged
    d["suspects"] = sorted({f["attr"] for f in flagged})
    where = ", ".join(f"{f['attr']} ({f['file']}:{f['line']})" for f in flagged[:3])
    return ActionResult(d, f"{len(rows)} graph buffer(s), {len(flagged)} flagged"
                           + (f": {where}" if where else ""))


def _flags(ctx: StepContext, a: dict[str, Any]) -> ActionResult:
    fs = read_flags(ctx.remote(), ctx.host)
    d = {"package": fs.package, "version": fs.version, "count": len(fs.flags),
         "names": list(fs.names)}
    if a["check"]:
        fs.check(list(a["check"]))  # raises RefusedError naming the unknown flag
        d["checked"] = list(a["check"])
    return ActionResult(d, f"{len(fs.flags)} flags in {fs.package} {fs.version}"
                           + ("; the argv is accepted" if a["check"] else ""))


def _patch_apply(ctx: StepContext, a: dict[str, Any]) -> ActionResult:
    patch = load_patch(a["patch"])
    res = apply_patch(ctx.remote(), patch, host=ctx.host, dry_run=a["dry_run"],
                      force=a["force"])
    # only what this playbook changed is reverted on failure: not a patch that was already in
    if res.status in ("applied", "finished"):
        ctx.applied.append((res.patch_id, patch))
    d = to_plain(res)
    d["id"] = res.patch_id
    return ActionResult(d, f"{res.patch_id}: {res.status}"
                           + (f" ({len(res.changed)} file(s))" if res.changed else ""))


def _patch_revert(ctx: StepContext, a: dict[str, Any]) -> ActionResult:
    if bool(a["patch"]) == bool(a["all"]):
        raise DdprobeError("patch-revert: give `patch: ID` or `all: true` (not both)")
    res = revert_patch(ctx.remote(), a["patch"] or None, host=ctx.host,
                       all_patches=a["all"], force=a["force"])
    done = {pid for pid, _ in res.reverted}
    ctx.applied[:] = [(pid, p) for pid, p in ctx.applied if pid not in done and not a["all"]]
    return ActionResult(to_plain(res), f"reverted {', '.join(sorted(done)) or 'nothing'}")


def _patch_status(ctx: StepContext, a: dict[str, Any]) -> ActionResult:
    st = patch_status(ctx.remote(), host=ctx.host)
    d = to_plain(st)
    d["applied"] = [e.id for e in st.entries]
    return ActionResult(d, f"{len(st.entries)} patch(es) applied"
                           + (f": {', '.join(d['applied'])}" if st.entries else ""))


@contextlib.contextmanager
def _server_url(ctx: StepContext) -> Iterator[str]:
    s = ctx.host.server
    target = "127.0.0.1" if s.bind in ("", "0.0.0.0", "::", "[::]") else s.bind
    if ctx.host.transport == "local":
        yield f"http://{target}:{s.port}"
        return
    with ctx.remote().tunnel(s.port, target) as port:
        yield f"http://127.0.0.1:{port}"


def _probe(ctx: StepContext, a: dict[str, Any]) -> ActionResult:
    with _server_url(ctx) as url:
        rep = run_probes(url, suite=a["suite"], concurrency=a["concurrency"],
                         timeout=a["timeout"], tasks=a["tasks"] or None)
    d = to_plain(rep)
    d.pop("results", None)
    s = rep.summary
    acc = f", accept {s.accept_length:.2f}" if s.accept_length is not None else ""
    tok = f", {s.tok_s:.0f} tok/s" if s.tok_s is not None else ""
    return ActionResult(d, f"{s.label}{acc}{tok}")


def _cell_summary(c: CellResult) -> str:
    out = f"{c.config.key}: {c.outcome.value}"
    if c.probes:
        out += f", {c.probes.label}"
        if c.probes.accept_length is not None:
            out += f", accept {c.probes.accept_length:.2f}"
        if c.probes.tok_s is not None:
            out += f", {c.probes.tok_s:.0f} tok/s"
    if c.signature and c.outcome.value != "ok":
        out += f" ({c.signature.id})"
    return out


def _probe_options(a: dict[str, Any]) -> ProbeOptions:
    """The cell's probe options: the step's suite and tasks over the cell's defaults."""
    return ProbeOptions(**_given(suite=a.get("suite") or None,
                                 tasks=tuple(a["tasks"]) if a.get("tasks") else None))


def _run(ctx: StepContext, a: dict[str, Any]) -> ActionResult:
    """`run`: one cell (restart with a config, probe, classify) joins the playbook's run."""
    cfg = Config(budget=a["budget"], graph=a["graph"], max_bs=a["max_bs"],
                 backend=a["backend"], extra_args=tuple(a["extra_args"] or ()))
    log_dir = ctx.store.dir / "logs" if ctx.store is not None else None
    cell = run_cell(ctx.remote(), ctx.host, cfg, probe=_probe_options(a), log_dir=log_dir,
                    stop_after=bool(a.get("stop_after")), caches=ctx.caches)
    cell = ctx.add_cell(cell)
    d = to_plain(cell)
    d["key"] = cell.config.key
    d["ok"] = cell.outcome.value == "ok"
    return ActionResult(d, _cell_summary(cell))


def as_record(obj: Any, what: str) -> RunRecord:
    """A sweep/bisect/smoke result as its run record (a RunRecord, a run dir, or a holder)."""
    if isinstance(obj, RunRecord):
        return obj
    if isinstance(obj, (str, Path)) and (Path(obj) / "journal.jsonl").is_file():
        return load_run(Path(obj))
    for attr in ("record", "rec", "run"):
        inner = getattr(obj, attr, None)
        if isinstance(inner, RunRecord):
            return inner
    for attr in ("dir", "run_dir", "path"):
        p = getattr(obj, attr, None)
        if isinstance(p, (str, Path)) and (Path(p) / "journal.jsonl").is_file():
            return load_run(Path(p))
    raise DdprobeError(f"{what} returned {type(obj).__name__}: no run record in it")


def _record_data(rec: RunRecord) -> dict[str, Any]:
    end = rec.end or {}
    return {"run_id": rec.run_id, "dir": str(rec.dir), "finished": rec.finished,
            "cells": [{"key": c.config.key, **to_plain(c)} for c in rec.cells],
            "verdicts": [to_plain(v) for v in rec.verdicts],
            "restarts_used": end.get("restarts_used", rec.restarts_used),
            "restarts_full_sweep": end.get("restarts_full_sweep"),
            "exit_code": end.get("exit_code")}


def _joined(ctx: StepContext, rec: RunRecord) -> ActionResult:
    """A campaign's run: its cells and verdicts join the playbook's run."""
    ctx.add_record(rec)
    kinds = ", ".join(f"{v.kind} {','.join(map(str, v.budgets))}" for v in rec.verdicts)
    return ActionResult(_record_data(rec), f"run {rec.run_id}: {len(rec.cells)} cell(s)"
                                           + (f"; verdicts: {kinds}" if kinds else ""))


def _on_event(ctx: StepContext) -> Callable[[Any], None]:
    return lambda ev: ctx.progress(event_line(ev))


def event_line(ev: Any) -> str:
    """A bisect or sweep event as one progress line: a finished cell with its outcome and time,
    as the standalone bisect prints it (`gpu: b16-graph: crash cuda_illegal_address (12 s)`)."""
    text = str(getattr(ev, "text", ev))
    res = (getattr(ev, "data", None) or {}).get("result") \
        if getattr(ev, "kind", "") == "cell_done" else None
    if res is None:
        return text
    from ddprobe.bisect.cells import describe
    return f"{text}: {describe(res)}" + (f" ({res.wall_s:.0f} s)" if res.wall_s else "")


def _argv(what: str) -> list[str]:
    return ["ddprobe", "playbook", what]


def _sweep(ctx: StepContext, a: dict[str, Any]) -> ActionResult:
    req = SweepRequest(budgets=tuple(a["budgets"]), graph=a["graph"],
                       max_bs=(a["max_bs"],), backends=(a["backend"],),
                       **_given(repeat=a["repeat"]))
    model = run_sweep([ctx.host], req, root=ctx.runs_root, on_event=_on_event(ctx),
                      argv=_argv("sweep"), opts=ctx.opts, caches=ctx.caches)
    return _joined(ctx, write_run_reports(model).record)


def _bisect(ctx: StepContext, a: dict[str, Any]) -> ActionResult:
    req = BisectRequest(budgets=tuple(a["budgets"]),
                        **_given(max_bs=a["max_bs"], backend=a["backend"], repeat=a["repeat"],
                                 confirm_patch=a["confirm_patch"]))
    model = run_bisect([ctx.host], req, root=ctx.runs_root, on_event=_on_event(ctx),
                       argv=_argv("bisect"), opts=ctx.opts, caches=ctx.caches)
    return _joined(ctx, write_run_reports(model).record)


def _smoke(ctx: StepContext, a: dict[str, Any]) -> ActionResult:
    model = run_smoke([ctx.host], SmokeRequest(budgets=tuple(a["budgets"] or ())),
                      root=ctx.runs_root,
                      argv=_argv("smoke"), opts=ctx.opts, caches=ctx.caches)
    rep = model.smoke
    assert rep is not None  # run_smoke's end entry holds its hosts
    if a["junit"]:
        junit = Path(a["junit"])
        try:
            junit.parent.mkdir(parents=True, exist_ok=True)
            junit.write_text(junit_xml(rep), encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"cannot write the JUnit report: {e.strerror}",
                              path=str(junit), key="junit") from None
    return _joined(ctx, model.record)


def campaign_action(target: str, what: str
                    ) -> Callable[[StepContext, dict[str, Any]], ActionResult]:
    """An extension action: a run of many cells through the function `target` names
    ("module:function"), called with what it asks for by parameter name (`bind_call`); the
    run's cells and verdicts join the playbook's run."""
    def run(ctx: StepContext, a: dict[str, Any]) -> ActionResult:
        provided: dict[str, Any] = {
            "host": ctx.host, "hosts": [ctx.host], "runs_root": ctx.runs_root,
            "on_event": _on_event(ctx), "argv": _argv(what), **a}
        return _joined(ctx, as_record(bind_call(resolve(target), provided, _HOST_ALIASES),
                                      what))
    return run


def _report(ctx: StepContext, a: dict[str, Any]) -> ActionResult:
    if a["run"]:
        run_dir = resolve_run(a["run"], ctx.runs_root)
    elif ctx.store is not None:
        run_dir = ctx.store.dir
        ctx.report_targets.add(run_dir)  # rendered again once the playbook has ended
    else:
        raise DdprobeError("report: no run to render (give `run: RUN_ID`)")
    formats = tuple(a["formats"] or ("md", "json", "csv", "html"))
    paths = write_reports(load_model(run_dir), formats)
    return ActionResult({"run_id": run_dir.name, "dir": str(run_dir),
                         "files": {k: str(v) for k, v in paths.items()}},
                        f"{', '.join(p.name for p in paths.values())} in {run_dir}")


def _fail(ctx: StepContext, a: dict[str, Any]) -> ActionResult:
    raise StepFailed(a["message"])


def builtin_registry() -> ActionRegistry:
    reg = ActionRegistry()
    b = Arg("budgets", "ints", help="draft budgets, e.g. 8,16,32,64")
    for spec in (
        ActionSpec("facts", "host facts: GPUs, CUDA, python, the install", (), _facts),
        ActionSpec("grep", "search the install's sources on the host", (), _grep, (
            Arg("pattern", required=True), Arg("path"), Arg("context", "int", default=0),
            Arg("fixed", "bool", default=False), Arg("ignore_case", "bool", default=False))),
        ActionSpec("grep-buffers", "CUDA-graph buffers, sized per budget", (), _grep_buffers,
                   (Arg("backend", default="all"), Arg("max_bs", "int"), b,
                    Arg("context_len", "int"), Arg("include_per_batch", "bool", default=False))),
        ActionSpec("flags", "launch flags of the installed version (optionally check an argv)",
                   (), _flags, (Arg("check", "strs"),)),
        ActionSpec("patch-apply", "apply a patch (reverted if a later step fails)", (),
                   _patch_apply, (Arg("patch", required=True),
                                  Arg("force", "bool", default=False),
                                  Arg("dry_run", "bool", default=False)), mutates=True),
        ActionSpec("patch-revert", "revert a patch (or all)", (), _patch_revert,
                   (Arg("patch"), Arg("all", "bool", default=False),
                    Arg("force", "bool", default=False)), mutates=True),
        ActionSpec("patch-status", "patches applied on the host", (), _patch_status),
        ActionSpec("probe", "probe the running server (coding suite, acceptance, tok/s)", (),
                   _probe, (Arg("suite", default="coding"), Arg("concurrency", "int", default=8),
                            Arg("timeout", "float", default=300.0), Arg("tasks", "strs"))),
        ActionSpec("run", "one cell: restart with a config, probe, classify", (), _run,
                   (Arg("budget", "int", required=True), Arg("graph", "bool", default=True),
                    Arg("max_bs", "int"), Arg("backend"), Arg("extra_args", "strs"),
                    Arg("suite"), Arg("tasks", "strs"),
                    Arg("stop_after", "bool", default=False)), mutates=True),
        ActionSpec("sweep", "the full budget x graph matrix", (), _sweep,
                   (Arg("budgets", "ints", required=True),
                    Arg("graph", default="both", choices=tuple(GRAPH_MODES)),
                    Arg("max_bs", "int"), Arg("backend"), Arg("repeat", "int")), mutates=True),
        ActionSpec("bisect", "adaptive plan to a verdict per failure mode", (), _bisect,
                   (Arg("budgets", "ints", required=True), Arg("max_bs", "int"),
                    Arg("backend"), Arg("repeat", "int"), Arg("confirm_patch")), mutates=True),
        ActionSpec("smoke", "the CI smoke check at the production budget", (), _smoke,
                   (b, Arg("junit")), mutates=True),
        ActionSpec("report", "write report.md/json/csv/html for this playbook or a run", (),
                   _report, (Arg("run"), Arg("formats", "strs"))),
        ActionSpec("fail", "stop the playbook with a message (use with when:)", (), _fail,
                   (Arg("message", default="stopped by the playbook"),)),
    ):
        reg.register(spec)
    return reg
