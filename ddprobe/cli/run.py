"""`ddprobe run --host H --budget 16 [--graph/--no-graph] [--max-bs N] [--backend B] [--json]`:
one cell (lock, restart with the config, health wait, probes, classify). The options (shared ones
from `ddprobe.cli.options`) become one `cell.experiment.CellRequest`, handed to
`run_cell_request` (or, with --differential, `cell.differential.run_differential`).

Also the pieces `ddprobe server` shares: building a Config from options, the live progress
reporter (stderr; a heartbeat line instead of a spinner when stderr is not a terminal).
"""
from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from ddprobe.cell.experiment import (
    Baseline,
    CellReporter,
    CellRequest,
    ProbeOptions,
    run_cell_request,
)
from ddprobe.cli import common, options
from ddprobe.defaults import PROBE_CONCURRENCY, PROBE_MAX_TOKENS, PROBE_SUITE, PROBE_TIMEOUT_S
from ddprobe.errors import ConfigError, UsageError
from ddprobe.exitcodes import ExitCode, for_outcome
from ddprobe.inventory import Host, env_name_problem
from ddprobe.probes.runner import TaskResult
from ddprobe.report.cell import render_cell, render_differential
from ddprobe.report.live import LiveStatus
from ddprobe.results import CellResult, Config, Outcome
from ddprobe.untrusted import last_chars

LAST_LINE_CAP = 90  # characters of the server's last log line on the status line


class LiveReporter(LiveStatus, CellReporter):
    """Stage, elapsed time and the server's last log line on stderr (transient)."""

    def __init__(self, console: Console, *, heartbeat: float = 10.0) -> None:
        self.console = console
        self.live = console.is_terminal
        self.heartbeat, self._last_beat = heartbeat, time.monotonic()

    def _show(self, text: str, *, beat: bool = False) -> None:
        if self._set_status(text):
            return
        if beat and time.monotonic() - self._last_beat >= self.heartbeat:
            self._last_beat = time.monotonic()
            self.console.print(text, markup=False, highlight=False)

    def stage(self, name: str, detail: str = "") -> None:
        self._show(f"{name}: {detail}" if detail else name)

    def health(self, elapsed: float, timeout: float, stage: str, last_line: str) -> None:
        line = last_chars(last_line, LAST_LINE_CAP) if last_line else "(no log yet)"
        self._show(f"waiting for {stage} ({elapsed:.0f}s of {timeout:.0f}s)  {line}", beat=True)

    def probe(self, result: TaskResult, done: int, total: int) -> None:
        mark = "pass" if result.passed else "FAIL"
        self._show(f"probing {done}/{total}: {result.task_id} {mark}", beat=True)


def parse_env(items: list[str] | None) -> tuple[tuple[str, str], ...]:
    out = []
    for item in items or []:
        k, eq, v = item.partition("=")
        if not eq or not k:
            raise UsageError(f"--env takes KEY=VALUE, got {item!r}")
        if env_name_problem(k):
            raise UsageError(f"--env: {env_name_problem(k)}")
        out.append((k, v))
    return tuple(sorted(out))


def make_config(host: Host, *, budget: int | None, graph: bool, max_bs: int | None,
                backend: str | None, extra: list[str] | None,
                env: list[str] | None) -> Config:
    """A Config from CLI options; unset values come from the host's production settings."""
    s = host.server
    b = budget if budget is not None else s.budget
    if b is None:
        raise UsageError(f"give --budget (host '{host.name}' has no server.budget)")
    words: list[str] = []
    for e in extra or []:
        try:
            words += shlex.split(e)
        except ValueError as err:
            raise UsageError(f"--extra {e!r}: {err}") from None
    return Config(budget=b, graph=graph, max_bs=max_bs if max_bs is not None else s.max_bs,
                  backend=backend or s.backend, extra_args=tuple(words), env=parse_env(env))


def load_baseline(path: str) -> Baseline:
    """A baseline from a previous `ddprobe run --json` (a cell), for degraded/differential."""
    doc = common.read_json_file(path, "baseline")
    try:
        return Baseline.from_cell(CellResult.from_dict(doc))
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"not a cell from `ddprobe run --json` ({e})", path=path) from None



def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_cmd(
        host: options.Hosts,
        budget: options.Budget = None,
        graph: options.Graph = True,
        max_bs: options.MaxBs = None,
        backend: options.Backend = None,
        extra: options.Extra = None,
        env: options.Env = None,
        health_timeout: options.HealthTimeout = None,
        suite: options.Suite = PROBE_SUITE,
        concurrency: options.Concurrency = PROBE_CONCURRENCY,
        tasks: options.Tasks = None,
        max_tokens: options.MaxTokens = PROBE_MAX_TOKENS,
        probe_timeout: float = typer.Option(PROBE_TIMEOUT_S, "--probe-timeout",
                                            help="Per-request timeout (s)."),
        baseline: Optional[str] = typer.Option(
            None, "--baseline", help="A previous `ddprobe run --json` to compare with "
                                     "(degraded tok/s; answers, for the differential check)."),
        keep_answers: bool = typer.Option(False, "--keep-answers",
                                          help="Keep the answers in the JSON (to serve as a "
                                               "later --baseline)."),
        log_dir: Optional[Path] = typer.Option(None, "--log-dir",
                                               help="Copy the server log here."),
        break_lock: options.BreakLock = False,
        stop_after: bool = typer.Option(False, "--stop-after",
                                        help="Stop the server after the cell (default: leave "
                                             "a working server running)."),
        differential: bool = typer.Option(
            False, "--differential",
            help="Run the budget without and then with CUDA graphs and compare the greedy "
                 "outputs token by token: a divergence makes the graph cell garbage."),
        as_json: options.Json = False,
    ) -> None:
        """One cell: restart the server with a config, wait for health, probe, classify."""
        h = common.one_host(host)
        cfg = make_config(h, budget=budget, graph=graph, max_bs=max_bs, backend=backend,
                          extra=extra, env=env)
        if differential and baseline:
            raise UsageError("--differential compares graph with eager: it takes no "
                             "--baseline")
        ids = tuple(tasks or ()) or None  # None, () ('all'): the whole suite
        req = CellRequest(cfg, baseline=load_baseline(baseline) if baseline else None,
                          probe=ProbeOptions(suite=suite, concurrency=concurrency, tasks=ids,
                                             max_tokens=max_tokens, timeout=probe_timeout),
                          health_timeout=health_timeout, keep_answers=keep_answers,
                          log_dir=log_dir, stop_after=stop_after, differential=differential)
        if req.differential:
            _differential(h, req, break_lock=break_lock, as_json=as_json)
            return
        with common.env().connect(h) as r, LiveReporter(common.env().err) as rep:
            cell = run_cell_request(r, h, req, caches=common.env().caches, reporter=rep,
                                    break_lock=break_lock)
        if as_json:
            common.emit_json(cell.to_dict())
        else:
            render_cell(cell, common.env().out)
        code = for_outcome(cell.outcome)
        if cell.outcome is Outcome.ERROR and cell.error_kind == "unreachable":
            code = ExitCode.UNREACHABLE
        if code != ExitCode.OK:
            raise typer.Exit(int(code))


def _differential(h: Host, req: CellRequest, *, break_lock: bool, as_json: bool) -> None:
    from ddprobe.cell.differential import run_differential
    with common.env().connect(h) as r, LiveReporter(common.env().err) as rep:
        pair = run_differential(r, h, req, reporter=rep, caches=common.env().caches,
                                break_lock=break_lock)
    if as_json:
        common.emit_json(pair.to_dict())
    else:
        render_differential(pair, common.env().out)
    worst = pair.graph if pair.graph.outcome is not Outcome.OK else pair.eager
    code = for_outcome(worst.outcome)
    if code != ExitCode.OK:
        raise typer.Exit(int(code))
