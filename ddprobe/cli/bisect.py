"""`ddprobe bisect`, `ddprobe bisect log|replay`, `ddprobe sweep`.

    ddprobe bisect --host H --budgets 8,16,32,64 [--max-bs N] [--backend B] [--repeat N]
                   [--order auto|eager-first|graph-first] [--confirm-patch PATCH]
                   [--sanitize] [--no-latent-check] [--no-cheap-cells] [--oversize-factor N]
                   [--plan] [--resume RUN_ID] [--exit-protocol bisect] [--json]
                   [--events FILE|-]
    ddprobe bisect log RUN_ID          the replayable session log (git bisect log format)
    ddprobe bisect replay FILE         re-derive the verdicts from a (possibly edited) log
    ddprobe sweep --host H --budgets 8,16,32 [--graph both|on|off] [--max-bs 64,16] [--json]

Exit codes: 0 nothing fails, 1 a failure mode was found, 6 inconclusive, 7 refused; with
`--exit-protocol bisect` (for `git bisect run`): 0 good, 1 bad, 125 skip (infrastructure,
flaky), 128 abort (ddprobe cannot run: bad usage or configuration).

The options shared with other commands are declared once in `ddprobe.cli.options`; the
command builds the library's `BisectRequest` (or `SweepRequest`) from them and hands it on.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ddprobe.cli import common, options
from ddprobe.defaults import OVERSIZE_FACTOR, PROBE_CONCURRENCY
from ddprobe.errors import (
    ConfigError,
    DdprobeError,
    LockedError,
    RemoteError,
    ServerError,
    UsageError,
)
from ddprobe.exitcodes import ExitCode
from ddprobe.intlist import budget_set
from ddprobe.inventory import Host
from ddprobe.store import RunRecord, find_run, load_run

# The bisect engine, the planner and the renderers are imported by the command that runs
# (a completion or `--help` builds this module's options only: issue 24.16).
if TYPE_CHECKING:
    from ddprobe.bisect.engine import Event, EventSink
    from ddprobe.bisect.run import BisectRequest
    from ddprobe.bisect.verdicts import ExitProtocol
    from ddprobe.report.events import EventStream


DEFAULT_BISECT_TASKS = ("8",)  # one probe wave: enough to tell ok from garbage, fast


def _budgets(budgets: options.Ints | None) -> tuple[int, ...]:
    if not budgets:
        raise UsageError("give --budgets, e.g. --budgets 8,16,32,64")
    return budget_set(budgets)


def _protocol_code(e: DdprobeError) -> int:
    """An error under --exit-protocol bisect: infrastructure -> 125 (skip), else abort."""
    return int(ExitCode.BISECT_SKIP) if isinstance(e, (RemoteError, LockedError, ServerError)) \
        else int(ExitCode.BISECT_ABORT)


def _protocol_exit(e: DdprobeError, *, as_json: bool) -> int:
    common.env().err.print(common.error_line(e), highlight=False)
    code = _protocol_code(e)
    if as_json:
        common.emit_json_error(str(e), code, type(e).__name__)
    return code


def register(app: typer.Typer) -> None:
    bis = typer.Typer(help="Find where a config starts failing and why (buffer sizing, graph "
                           "capture or kernel), in the fewest restarts.",
                      invoke_without_command=True, no_args_is_help=False)

    @bis.callback(invoke_without_command=True)
    def bisect_cmd(
        ctx: typer.Context,
        host: options.HostsOrResume = None,
        budgets: options.Budgets = None,
        max_bs: options.MaxBs = None,
        backend: options.Backend = None,
        repeat: options.Repeat = 1,
        order: options.Order = None,
        graph_first: options.GraphFirst = False,
        eager_first: options.EagerFirst = False,
        confirm_patch: Optional[str] = typer.Option(
            None, "--confirm-patch", help="Apply this patch, re-run each failing cell, keep it "
                                          "if it fixes one, else revert."),
        no_latent_check: bool = typer.Option(
            False, "--no-latent-check",
            help="Do not re-run passing graph budgets under compute-sanitizer memcheck (the "
                 "latent check runs by default when the host has compute-sanitizer and "
                 "grep-buffers flags a buffer or a larger budget hits a memory fault)."),
        sanitize: bool = typer.Option(False, "--sanitize",
                                      help="A compute-sanitizer cell per crash mode, when "
                                           "the host has it."),
        no_compare: bool = typer.Option(
            False, "--no-compare",
            help="Do not compare the passing graph budgets kept with eager (by default the "
                 "largest passing budget and the kept one run again without CUDA graphs and "
                 "a divergence of the greedy output fails the budget)."),
        baseline: Optional[str] = typer.Option(
            None, "--baseline", help="A stored eager cell (`ddprobe run --no-graph "
                                     "--keep-answers --json`): where graph and eager differ, "
                                     "eager is checked against it too."),
        plan: bool = typer.Option(False, "--plan", help="Print the plan, the preflight of "
                                  "every budget and the static suspects, and exit (no "
                                  "restart)."),
        context_len: options.ContextLen = None,
        thorough: bool = typer.Option(False, "--thorough",
                                      help="Restart every budget (none is assumed ok from "
                                           "its neighbours): finds a failure at one budget."),
        no_cheap_cells: bool = typer.Option(
            False, "--no-cheap-cells",
            help="Load the real weights in every cell (by default a cell whose question is "
                 "only 'does it crash' runs first with --load-format dummy, the batch sizes "
                 "it needs and no warm-up, where the host's SGLang accepts it; the inventory's "
                 "server.cheap_cells: false does this per host)."),
        oversize_factor: options.OversizeFactor = OVERSIZE_FACTOR,
        resume: options.Resume = None,
        exit_protocol: options.ExitProtocolOpt = None,
        tasks: options.BisectTasks = None,
        concurrency: options.Concurrency = PROBE_CONCURRENCY,
        no_parallel: options.NoParallel = False,
        keep_server: options.KeepServer = False,
        break_lock: options.BreakLock = False,
        as_json: options.Json = False,
        events: options.Events = None,
    ) -> None:
        """Bisect budgets with CUDA graphs, then diagnose each failure mode."""
        if ctx.invoked_subcommand is not None:
            return
        protocol = options.protocol_of(exit_protocol)
        stream = _open_events(events, plan=plan, as_json=as_json)
        try:
            rec, req, hosts = _resumed(resume) if resume else (None, None, [])
            if req is None:
                if not host:
                    raise UsageError("give --host (a host, group or comma list; see "
                                     "`ddprobe hosts`)")
                if confirm_patch:
                    from ddprobe.sources.patches import load_patch
                    load_patch(confirm_patch)  # a missing/bad patch: before any restart
                req = _request(**ctx.params)  # the parsed options, by name
                hosts = common.hosts(host)
            argv = ["bisect", *(["--host", host] if host else []),
                    *(["--budgets", ",".join(map(str, budgets))] if budgets else []), *ctx.args]
            code = _bisect(req, hosts, rec=rec, plan=plan, protocol=protocol,
                           break_lock=break_lock, as_json=as_json, argv=argv, stream=stream)
        except DdprobeError as e:
            if stream is not None:
                stream.error(str(e), type(e).__name__, _protocol_code(e)
                             if protocol == "bisect" else int(e.exit_code))
            if protocol == "bisect":
                raise typer.Exit(_protocol_exit(e, as_json=as_json)) from None
            raise
        except KeyboardInterrupt:
            if stream is not None:
                stream.error("interrupted", "KeyboardInterrupt", int(ExitCode.INTERRUPTED))
            raise
        finally:
            if stream is not None:
                stream.close()
        raise typer.Exit(code)

    @bis.command("log")
    def log_cmd(run_id: Optional[str] = typer.Argument(
            None, metavar="RUN_ID", help="Run id (or a prefix, or 'latest'); default: the "
                                           "manual bisect in progress."),
            as_json: options.Json = False) -> None:
        """Print a bisect's session log: one runnable `ddprobe bisect` command a line.

        Example:

            ddprobe bisect log latest > session.log; ddprobe bisect replay session.log
        """
        from ddprobe.bisect.sessionlog import render_log
        if run_id is None:
            from ddprobe.bisect import manual
            manual.load()  # no session in progress: one clear message
            text = manual.session_path().read_text(encoding="utf-8")
        else:
            text = render_log(load_run(find_run(run_id)))
        if as_json:
            common.emit_json({"log": text, "commands": [
                ln for ln in text.splitlines() if ln.startswith("ddprobe ")]})
            return
        common.env().out.file.write(text)
        common.env().out.file.flush()

    @bis.command("replay")
    def replay_cmd(file: Path = typer.Argument(..., help="A session log (from `bisect log`)."),
                   as_json: options.Json = False) -> None:
        """Re-derive the verdicts from a session log without touching a host."""
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"cannot read: {e.strerror}", path=str(file)) from None
        from ddprobe.bisect.sessionlog import replay
        from ddprobe.report.terminal import render_replay
        results = replay(text, str(file))
        verdicts = [v for _, _, vs in results for v in vs]
        if as_json:
            common.emit_json({"verdicts": [v.to_dict() for v in verdicts]})
            return
        render_replay(results, common.env().out)

    from ddprobe.cli import bisectman
    bisectman.register(bis)
    app.add_typer(bis, name="bisect")

    @app.command("sweep")
    def sweep_cmd(
        host: options.HostsOrResume = None,
        budgets: options.Budgets = None,
        graph: options.SweepGraph = options.GraphChoice.both,
        max_bs: options.MaxBsList = None,
        backend: options.BackendList = None,
        repeat: options.Repeat = 1,
        tasks: options.Tasks = None,
        concurrency: options.Concurrency = PROBE_CONCURRENCY,
        resume: options.Resume = None,
        no_parallel: options.NoParallel = False,
        keep_server: options.KeepServer = False,
        break_lock: options.BreakLock = False,
        as_json: options.Json = False,
    ) -> None:
        """The full matrix of cells: outcomes, acceptance, tok/s, coding, signatures."""
        from ddprobe.bisect.sweep import SweepRequest, run_sweep
        from ddprobe.report.jsondoc import sweep_doc
        from ddprobe.report.live import EventRenderer
        from ddprobe.report.terminal import render_sweep
        from ddprobe.report.write import write_run_reports
        rec = None
        if resume:
            rec = load_run(find_run(resume))
            if rec.meta.get("command") != "sweep" or not rec.resumable:
                raise UsageError(f"run {rec.run_id} is not a sweep with cells left to run "
                                 f"(unfinished, or with cells that errored)")
            req = SweepRequest.from_run(rec)
            hosts = common.hosts(",".join(rec.meta.get("hosts") or []))
        else:
            req = SweepRequest(budgets=_budgets(budgets), graph=options.graph_of(graph),
                               max_bs=tuple(max_bs) if max_bs else (None,),
                               backends=tuple(backend) if backend else (None,),
                               repeat=repeat, tasks=tuple(tasks or ()), parallel=not no_parallel,
                               keep_server=keep_server, concurrency=concurrency)
            req.validate()
            if not host:
                raise UsageError("give --host (or --resume RUN_ID)")
            hosts = common.hosts(host)
        with EventRenderer(common.env().err, quiet=False) as ren:
            model = run_sweep(hosts, req, resume=rec, on_event=ren, break_lock=break_lock,
                              opts=common.env().remote_options, caches=common.env().caches,
                              argv=["sweep", "--host", host or "", "--budgets",
                                    ",".join(map(str, budgets or ()))])
        model = write_run_reports(model)
        if as_json:
            common.emit_json(sweep_doc(model))
        else:
            render_sweep(model, common.env().out)
        if model.errored:
            common.env().err.print(f"{model.errored} cell(s) ended in an infrastructure error: the "
                                   f"matrix is incomplete; run them again with `ddprobe sweep "
                                   f"--resume {model.run_id}`", markup=False)
        raise typer.Exit(model.exit_code or 0)


def _request(*, budgets: options.Ints | None, max_bs: int | None, backend: str | None,
             repeat: int, order: options.OrderChoice | None, graph_first: bool,
             eager_first: bool, confirm_patch: str | None, no_latent_check: bool,
             sanitize: bool, no_compare: bool, baseline: str | None,
             context_len: int | None, thorough: bool, no_cheap_cells: bool,
             oversize_factor: int, tasks: options.TaskWords | None, no_parallel: bool,
             keep_server: bool, concurrency: int = PROBE_CONCURRENCY,
             **_cli: object) -> BisectRequest:
    """The BisectRequest of the parsed options (`ctx.params`; `_cli`: the options that are
    the command's own, not the run's: --host, --plan, --resume, --json, ...)."""
    from ddprobe.bisect.run import BisectRequest
    return BisectRequest(
        budgets=_budgets(budgets), max_bs=max_bs, backend=backend,
        order=options.order_of(order, graph_first=graph_first, eager_first=eager_first),
        repeat=repeat, sanitize=sanitize, confirm_patch=confirm_patch,
        parallel=not no_parallel,
        tasks=DEFAULT_BISECT_TASKS if tasks is None else tuple(tasks),
        keep_server=keep_server, latent_check=not no_latent_check, context_len=context_len,
        thorough=thorough, oversize_factor=oversize_factor, cheap_cells=not no_cheap_cells,
        compare=not no_compare, baseline=baseline, concurrency=concurrency)


def request_of(argv: Sequence[str]) -> BisectRequest:
    """The BisectRequest `ddprobe bisect ARGV` would run, by the command's own options,
    parsers and defaults; nothing runs, no host is contacted. For the code that states a
    bisect as its flags (the testbed scenarios' `expect:` lines, read by the benchmarks and
    tests/test_scenarios.py): they never parse ddprobe's flags by hand."""
    from ddprobe.cli import get_app
    group = typer.main.get_command(get_app())
    bisect = group.commands["bisect"]  # type: ignore[attr-defined]
    with bisect.make_context("bisect", list(argv)) as ctx:
        return _request(**ctx.params)


def _resumed(run_id: str) -> tuple[RunRecord, BisectRequest, list[Host]]:
    """--resume: the run, its request and its hosts (the command line's are not asked)."""
    from ddprobe.bisect.run import load_resume, resume_request
    rec = load_resume(run_id)
    return rec, resume_request(rec), common.hosts(",".join(rec.meta.get("hosts") or []))


def _bisect(req: BisectRequest, hosts: list[Host], *, rec: RunRecord | None, plan: bool,
            protocol: ExitProtocol | None, break_lock: bool, as_json: bool,
            argv: list[str], stream: EventStream | None = None) -> int:
    from ddprobe.bisect.run import run_bisect
    from ddprobe.bisect.verdicts import exit_code
    from ddprobe.report.jsondoc import bisect_doc
    from ddprobe.report.live import EventRenderer
    from ddprobe.report.terminal import render_bisect
    from ddprobe.report.write import write_run_reports
    if plan:
        _print_plan(req, hosts, as_json=as_json)
        return 0
    with EventRenderer(common.env().err, quiet=False) as ren:
        model = run_bisect(hosts, req, resume=rec, on_event=_tee(ren, stream),
                           break_lock=break_lock, opts=common.env().remote_options,
                           caches=common.env().caches, argv=argv)
    model = write_run_reports(model)
    code = exit_code(model.verdicts, protocol=protocol)
    if stream is not None:
        stream.result(bisect_doc(model), code)
    if stream is not None and stream.to_stdout:
        pass  # stdout is the stream
    elif as_json:
        common.emit_json(bisect_doc(model))
    else:
        render_bisect(model, common.env().out)
    return code


def _open_events(events: str | None, *, plan: bool, as_json: bool) -> EventStream | None:
    """--events: the stream (checked before anything runs)."""
    if events is None:
        return None
    if plan:
        raise UsageError("--events streams a run; --plan runs nothing (use --plan --json)")
    if events == "-" and as_json:
        raise UsageError("--events - ends with the --json document (its `result` line): give "
                         "one of them")
    from ddprobe.report.events import EventStream
    return EventStream(events)


def _tee(ren: EventSink, stream: EventStream | None) -> EventSink:
    if stream is None:
        return ren

    def sink(e: Event) -> None:
        ren(e)
        stream(e)
    return sink


def _print_plan(req: BisectRequest, hosts: list[Host], *, as_json: bool) -> None:
    """--plan: the plan, the preflight of every budget and the static suspects (no restart)."""
    from ddprobe.bisect.latent import LatentOptions
    from ddprobe.bisect.planner import small_max_bs_for
    from ddprobe.bisect.plantext import plan_lines
    eff = req.max_bs or hosts[0].server.max_bs
    latent = LatentOptions(enabled=req.latent_check, available=False,
                           note="if the host has compute-sanitizer: decided when the run "
                                "gathers facts") if req.latent_check else None
    from ddprobe.bisect.cheap import CheapSupport
    from ddprobe.bisect.costs import CostModel, host_history
    from ddprobe.store import runs_root
    # cheap cells as the run would use them if the host's SGLang accepts them (checked when
    # the run starts); the cost model from the first host's earlier cells
    cheap = CheapSupport(req.cheap_cells and req.repeat == 1 and hosts[0].server.cheap_cells,
                         bs_flag=True, max_bs=eff)
    spec = req.spec(small_max_bs=small_max_bs_for(eff), sanitize_available=False,
                    sanitize_note="decided when the run gathers facts", latent=latent,
                    cheap=cheap, cost=CostModel(host_history(runs_root(), hosts[0].name)))
    k = len(hosts) if req.parallel else 1
    lines = plan_lines(spec, k=k)
    from ddprobe.bisect.preflight import preview
    looks = preview(hosts, opts=common.env().remote_options, budgets=req.budgets,
                    base=req.base(), backend=req.backend, context_len=req.context_len,
                    factor=req.oversize_factor, caches=common.env().caches,
                    compare=req.compare)
    if as_json:
        common.emit_json({"plan": lines, "request": req.to_dict(),
                          "hosts": [h.name for h in hosts],
                          "preview": [p.to_dict() for p in looks]})
        return
    if k > 1:
        lines.append(f"  (assuming the {k} hosts are identical; hosts that differ run "
                     "the plan side by side)")
    for line in lines + [ln for p in looks for ln in p.lines()]:
        common.env().out.print(line)
