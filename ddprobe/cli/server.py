"""`ddprobe server start|stop|restart|status|logs --host H`: the host's server manager, directly.

start/restart/stop take the host lock for their duration; status and logs only read. start and
restart build one `cell.restart.StartRequest` from the options (shared ones from
`ddprobe.cli.options`) and hand it to `start_server`.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Optional

import httpx
import typer
from rich.text import Text

from ddprobe import httpclients, remote
from ddprobe.cell.restart import StartRequest, start_server
from ddprobe.cli import common, options
from ddprobe.cli.run import LiveReporter, make_config
from ddprobe.errors import UsageError
from ddprobe.exitcodes import OUTCOME_EXIT, ExitCode
from ddprobe.inventory import Host
from ddprobe.report.cell import render_start
from ddprobe.server import HostLock, Manager, get_manager, read_lock
from ddprobe.server.launch import server_target
from ddprobe.untrusted import clean

# a start's status: up, or the outcome it failed with (exit codes as `ddprobe run` gives them)
_START_EXIT = {"healthy": ExitCode.OK, "started": ExitCode.OK,
               **{s: OUTCOME_EXIT[s] for s in ("crash", "hang", "refused", "error")}}


def register(app: typer.Typer) -> None:
    srv = typer.Typer(help="The host's server: start, stop, restart, status, logs.",
                      no_args_is_help=True)
    app.add_typer(srv, name="server")

    def _start(h: Host, req: StartRequest, *, break_lock: bool, as_json: bool) -> None:
        with common.env().connect(h) as r, HostLock(r, h, break_lock=break_lock,
                                                      caches=common.env().caches), \
                LiveReporter(common.env().err) as rep:
            res = start_server(r, h, req, caches=common.env().caches, reporter=rep)
        if as_json:
            common.emit_json(res.to_dict())
        else:
            render_start(res, common.env().out)
        code = _START_EXIT.get(res.status, ExitCode.SERVER)
        if code != ExitCode.OK:
            raise typer.Exit(int(code))

    def _opts(restart: bool) -> Callable[..., None]:
        def cmd(
            host: options.Hosts,
            budget: options.Budget = None,
            graph: options.Graph = True,
            max_bs: options.MaxBs = None,
            backend: options.Backend = None,
            extra: options.Extra = None,
            env: options.Env = None,
            wait: bool = typer.Option(True, "--wait/--no-wait",
                                      help="Wait until /health_generate answers."),
            health_timeout: options.HealthTimeout = None,
            break_lock: options.BreakLock = False,
            as_json: options.Json = False,
        ) -> None:
            h = common.one_host(host)
            req = StartRequest(make_config(h, budget=budget, graph=graph, max_bs=max_bs,
                                           backend=backend, extra=extra, env=env),
                               restart=restart, wait=wait, health_timeout=health_timeout)
            _start(h, req, break_lock=break_lock, as_json=as_json)
        cmd.__doc__ = ("Stop the running server, then start it with a config and wait for "
                       "health." if restart else
                       "Start the server with a config (refused while one runs) and wait "
                       "for health.")
        return cmd

    srv.command("start")(_opts(False))
    srv.command("restart")(_opts(True))

    @srv.command("stop")
    def stop_cmd(host: options.Hosts,
                 grace: Optional[float] = typer.Option(None, "--grace",
                                                       help="TERM grace (s) before KILL."),
                 break_lock: options.BreakLock = False,
                 as_json: options.Json = False) -> None:
        """Stop the server: TERM its process group, KILL after the grace; verify it is gone."""
        h = common.one_host(host)
        with common.env().connect(h) as r, HostLock(r, h, break_lock=break_lock,
                                                      caches=common.env().caches):
            info = get_manager(r, h).stop(grace)
        if as_json:
            common.emit_json({"host": h.name, **info.to_dict()})
        elif not info.was_running:
            common.env().out.print(f"{h.name}: no server running", highlight=False)
        else:
            sig = "+".join(info.signals)
            common.env().out.print(f"{h.name}: stopped {len(info.pids)} process(es) with {sig} in "
                                   f"{info.elapsed:.1f}s", highlight=False)
        if not info.clean:
            common.env().err.print(Text.assemble(("error:", "red"), f" {h.name}: {info.problem()}"))
            raise typer.Exit(int(ExitCode.SERVER))

    @srv.command("status")
    def status_cmd(host: options.Hosts, as_json: options.Json = False) -> None:
        """Is the server running, with which config; is it healthy; who holds the host lock."""
        h = common.one_host(host)
        with common.env().connect(h) as r:
            st = get_manager(r, h).status()
            lock = read_lock(r, h)
            healthy = _healthy(r, h) if st.running else False
        doc = {**st.to_dict(), "healthy": healthy,
               "lock": lock.to_dict() if lock else None}
        if as_json:
            common.emit_json(doc)
        else:
            state = ("running", "green") if st.running else ("not running", "yellow")
            extra = f" ({st.detail})" if st.detail else ""
            common.env().out.print(Text.assemble((h.name, "bold"), f" ({st.manager}): ", state,
                                                 extra), highlight=False)
            if st.running:
                up = f", up {st.uptime_s:.0f}s" if st.uptime_s is not None else ""
                common.env().out.print(f"  config {st.config_key or '?'}, pids "
                                       f"{', '.join(map(str, st.pids))}{up}, port {st.port}, "
                                       f"{'healthy' if healthy else 'NOT healthy'}",
                                       markup=False, highlight=False)
            if st.log_path:
                common.env().out.print(f"  log: {st.log_path}", markup=False, highlight=False)
            if lock:
                common.env().out.print(f"  locked by {lock.describe()}", markup=False,
                                       highlight=False)
        if not st.running:
            raise typer.Exit(int(ExitCode.FAILED))

    @srv.command("logs")
    def logs_cmd(host: options.Hosts,
                 tail: Optional[int] = typer.Option(None, "--tail", "-n", min=1,
                                                    help="Only the last N lines."),
                 since: Optional[float] = typer.Option(
                     None, "--since", help="Only lines logged in the last SECONDS (journal/"
                                           "docker; a command-manager log is per start)."),
                 follow: bool = typer.Option(False, "--follow", "-f",
                                             help="Keep printing new lines until the server "
                                                  "exits (Ctrl-C to stop)."),
                 as_json: options.Json = False) -> None:
        """The server log (of the running server, else of the last one)."""
        if as_json and follow:
            raise UsageError("--json and --follow exclude each other")
        h = common.one_host(host)
        with common.env().connect(h) as r:
            mgr = get_manager(r, h)
            if follow and tail is None and since is None:
                _follow(mgr, 0)  # the whole log, then what follows: one stream, nothing lost
                return
            when = None if since is None else _host_now(r) - since
            # where following starts is read before the log: a line written in between is
            # printed twice rather than lost (the server's last lines are the ones that matter)
            start = mgr.peek(0).offset if follow else 0
            text = mgr.logs(tail=tail, since=when)
            if as_json:  # host text: cleaned, as every JSON document ddprobe writes
                common.emit_json({"host": h.name, "lines": text.splitlines()})
                return
            _write(text)
            if follow:
                _follow(mgr, start)


def _write(text: str) -> None:
    # the host's log, byte for byte into a pipe or a file; on a terminal its escape sequences
    # (titles, clipboard writes, cursor moves) are removed first (docs/security.md)
    sys.stdout.write(clean(text) if sys.stdout.isatty() else text)
    sys.stdout.flush()


def _follow(mgr: Manager, off: int) -> None:
    """Print the log from byte `off` until the server exits."""
    delay = 0.2
    while True:
        p = mgr.peek(off)
        if p.data:
            _write(p.data)
            delay = 0.2
        off = p.offset
        if not p.alive:
            return
        time.sleep(delay)
        delay = min(delay * 1.5, 2.0)


def _host_now(r: remote.Remote) -> float:
    res = r.run(["date", "+%s"], timeout=30, check=True)
    return float(res.stdout.strip())


def _healthy(r: remote.Remote, h: Host) -> bool:
    try:
        with r.tunnel(h.server.port, server_target(h)) as port:
            res = httpclients.get(f"http://127.0.0.1:{port}/health", timeout=5.0)
            return res.status_code == 200
    except (httpx.HTTPError, OSError):
        return False

