"""`ddprobe probe --host H [--suite coding] [--concurrency N] [--json]`: probe a running server."""
from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ddprobe.cli import common, options
from ddprobe.defaults import PROBE_CONCURRENCY, PROBE_MAX_TOKENS, PROBE_SUITE, PROBE_TIMEOUT_S
from ddprobe.errors import ConfigError, DdprobeError, ServerError, UsageError
from ddprobe.exitcodes import ExitCode
from ddprobe.inventory import Host
from ddprobe.probes.client import ProbeHTTPError
from ddprobe.probes.coding import load_suite
from ddprobe.probes.runner import ProbeReport, TaskResult, baseline_from_report, run_probes
from ddprobe.report.probes import render_probes

_WILDCARD = ("", "0.0.0.0", "::", "[::]")


@contextlib.contextmanager
def _server_url(host: Host) -> Iterator[str]:
    """The URL of the host's server as seen from here, for the duration of the block.

    Local hosts (the built-in testbed) are reached directly; SSH hosts through a port forward
    over the host's one SSH connection, so the server never has to listen on a public address.
    """
    port = host.server.port
    bind = host.server.bind
    target = "127.0.0.1" if bind in _WILDCARD else bind
    if host.transport == "local":
        yield f"http://{_url_host(target)}:{port}"
        return
    with common.env().connect(host) as r, r.tunnel(port, target) as local_port:
        yield f"http://127.0.0.1:{local_port}"


def _url_host(h: str) -> str:
    return f"[{h}]" if ":" in h and not h.startswith("[") else h


def _load_baseline(path: str) -> dict[str, str]:
    doc = common.read_json_file(path, "baseline")
    texts = doc.get("texts") if isinstance(doc, dict) and "texts" in doc else doc
    if not isinstance(texts, dict) or not all(isinstance(v, str) for v in texts.values()):
        raise ConfigError("a baseline is an object of task id -> answer text", path=path,
                          key="texts")
    return {str(k): v for k, v in texts.items()}


def register(app: typer.Typer) -> None:
    @app.command("probe")
    def probe_cmd(
        host: Optional[str] = typer.Option(None, "--host", "-H",
                                           help="Host whose server to probe (its server port)."),
        url: Optional[str] = typer.Option(None, "--url",
                                          help="Probe this server URL instead of a host's."),
        suite: options.Suite = PROBE_SUITE,
        concurrency: options.Concurrency = PROBE_CONCURRENCY,
        tasks: options.Tasks = None,
        max_tokens: options.MaxTokens = PROBE_MAX_TOKENS,
        accept_tokens: int = typer.Option(
            128, "--accept-tokens", min=0,
            help="Tokens of the /generate request that measures acceptance (0: skip it)."),
        timeout: float = typer.Option(PROBE_TIMEOUT_S, "--timeout",
                                      help="Per-request timeout (s)."),
        baseline: Optional[str] = typer.Option(
            None, "--baseline", help="Compare answers with this baseline file (differential)."),
        save_baseline: Optional[str] = typer.Option(
            None, "--save-baseline", help="Write this run's answers as a baseline file."),
        as_json: options.Json = False,
    ) -> None:
        """Probe a running server: coding suite in a sandbox, acceptance length, tok/s."""
        if bool(host) == bool(url):
            raise UsageError("give exactly one of --host or --url")
        base = _load_baseline(baseline) if baseline else None
        ids = list(tasks or ()) or None  # None, () ('all'): the whole suite
        h = common.one_host(host) if host else None
        try:
            with contextlib.ExitStack() as stack:
                target = url or stack.enter_context(_server_url(h))  # type: ignore[arg-type]
                report = _run_with_progress(target, suite=suite, concurrency=concurrency,
                                            baseline=base, tasks=ids, max_tokens=max_tokens,
                                            accept_tokens=accept_tokens, timeout=timeout,
                                            show=sys.stderr.isatty() and not as_json)
            if report.results and all(r.errors and not r.text for r in report.results):
                raise ProbeHTTPError(report.base_url, "no answer to any probe: "
                                     + report.results[0].reason)
        except ProbeHTTPError:
            if h is not None:
                _raise_if_down(h)  # "the server is down" rather than httpx's ReadError
            raise
        if save_baseline:
            Path(save_baseline).write_text(json.dumps(
                {"suite": report.suite, "base_url": report.base_url,
                 "texts": baseline_from_report(report)}, indent=1) + "\n", encoding="utf-8")
        if as_json:
            common.emit_json(report.to_dict())
        else:
            render_probes(report, common.env().out)
        if not report.ok:
            raise typer.Exit(code=int(ExitCode.FAILED))


def _raise_if_down(h: Host) -> None:
    """No probe got an answer: when the host's server is not running, say so (and how to see
    why), instead of the HTTP error a dead server's port gives."""
    from ddprobe.server import get_manager
    try:
        with common.env().connect(h) as r:
            st = get_manager(r, h).status()
    except DdprobeError:
        return  # the host itself is the problem: the probe's own error stands
    if not st.running:
        raise ServerError(f"{h.name}: the server is not running (it exited or was stopped); "
                          f"its log: `ddprobe server logs --host {h.name}`, start it with "
                          f"`ddprobe server start --host {h.name}`")


def _run_with_progress(url: str, *, show: bool, **kw: object) -> ProbeReport:
    if not show:
        return run_probes(url, **kw)  # type: ignore[arg-type]
    with Progress(TextColumn("probing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}", markup=False), console=common.env().err,
                  transient=True, redirect_stdout=False, redirect_stderr=False) as prog:
        todo = load_suite(str(kw["suite"])).select(kw.get("tasks"))  # type: ignore[arg-type]
        bar = prog.add_task("", total=len(todo))

        def tick(r: TaskResult) -> None:
            prog.update(bar, advance=1, description=f"{r.task_id}: "
                        f"{'pass' if r.passed else 'FAIL'}")

        return run_probes(url, progress=tick, **kw)  # type: ignore[arg-type]
