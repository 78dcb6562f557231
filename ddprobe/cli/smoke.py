"""`ddprobe smoke --host H [--budgets ...] [--junit FILE] [--json]`: the CI check.

The options (shared ones from `ddprobe.cli.options`) become one `smoke.SmokeRequest`, which
`run_smoke` runs; --junit and --json are how the command shows the run's model.

Facts, flags check, one CUDA-graph cell at the production budget (`server.budget`), probes.
Exit codes: 0 ok, 4 unreachable, 5 server could not start (infrastructure), 7 refused,
8 crash, 9 garbage, 10 degraded, 11 hang (several hosts: the most severe; see ddprobe.smoke).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from ddprobe.bisect.cellrun import probe_options
from ddprobe.bisect.cells import describe
from ddprobe.cli import common, options
from ddprobe.errors import ConfigError
from ddprobe.report.jsondoc import smoke_doc
from ddprobe.report.junit import junit_xml
from ddprobe.report.smoke import render_smoke
from ddprobe.results import CellResult
from ddprobe.smoke import SmokeRequest, run_smoke


def register(app: typer.Typer) -> None:
    @app.command("smoke")
    def smoke_cmd(
        host: options.Hosts,
        budgets: options.Budgets = None,
        junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here."),
        tasks: options.Tasks = None,
        baseline: Optional[str] = typer.Option(
            None, "--baseline", help="A known-good cell (`ddprobe run --json` output): tok/s "
                                     "below its ratio is degraded (exit 10), answers that "
                                     "differ are garbage."),
        no_compare: bool = typer.Option(
            False, "--no-compare",
            help="Do not compare the graph cell's greedy output with eager (by default an "
                 "eager cell at the same budget, or the --baseline's answers; a divergence "
                 "fails the smoke as garbage, exit 9)."),
        as_json: options.Json = False,
    ) -> None:
        """CI smoke check: facts, flags, one graph cell at the production budget, probes,
        its greedy output against eager."""
        hosts = common.hosts(host)
        probe = probe_options(tuple(tasks or ()))  # task ids resolved before the baseline
        base = None
        if baseline:
            from ddprobe.cli.run import load_baseline
            base = load_baseline(baseline)
        req = SmokeRequest(budgets=tuple(budgets or ()), probe=probe, baseline=base,
                           compare=not no_compare)

        def progress(c: CellResult) -> None:
            common.env().err.print(f"{escape(c.host)}: {c.config.key}: {escape(describe(c))}",
                                   highlight=False)

        model = run_smoke(hosts, req, opts=common.env().remote_options,
                          caches=common.env().caches, on_cell=progress,
                          argv=["smoke", "--host", host])
        rep = model.smoke
        assert rep is not None  # run_smoke's end entry holds its hosts
        if junit is not None:
            try:
                junit.parent.mkdir(parents=True, exist_ok=True)
                junit.write_text(junit_xml(rep), encoding="utf-8")
            except OSError as e:
                raise ConfigError(f"cannot write the JUnit report: {e.strerror}",
                                  path=str(junit), key="--junit") from None
        if as_json:
            common.emit_json(smoke_doc(rep))
        else:
            render_smoke(rep, common.env().out)
        raise typer.Exit(rep.exit_code)
