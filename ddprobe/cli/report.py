"""`ddprobe report RUN_ID [--format ...] [--output FILE]`: re-render a run; no host is touched."""
from __future__ import annotations

import io
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.text import Text

from ddprobe.cli import common, options
from ddprobe.errors import DdprobeError, UsageError
from ddprobe.report import render, render_terminal, resolve_run, write_reports
from ddprobe.report.write import write_text_atomic
from ddprobe.runmodel import load_model
from ddprobe.safeconsole import SafeConsole


class Format(str, Enum):
    term = "term"
    md = "md"
    json = "json"
    csv = "csv"
    html = "html"
    all = "all"


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report_cmd(
        run_id: str = typer.Argument(..., metavar="RUN_ID",
                                     help="A run id, a unique prefix of one, `latest`, or a run "
                                          "directory."),
        fmt: Format = typer.Option(Format.term, "--format", "-f",
                                   help="term (default), md, json, csv (one row per cell), "
                                        "html (self-contained, with the grid and charts), or "
                                        "all (writes the four files into the run directory)."),
        output: Optional[Path] = typer.Option(None, "--output", "-o",
                                              help="Write to FILE instead of stdout."),
        runs: options.Runs = None,
        as_json: options.Json = False,  # the same as --format json
    ) -> None:
        """Re-render a stored run (sweep, bisect, smoke, playbook) without touching a host.

        Example: ddprobe report latest --format html --output b300.html
        """
        if as_json:
            if fmt not in (Format.term, Format.json):
                raise UsageError(f"--json is --format json; drop --format {fmt.value}")
            fmt = Format.json
        m = load_model(resolve_run(run_id, runs))
        if fmt is Format.all:
            if output is not None:
                raise DdprobeError("--format all writes into the run directory; drop --output")
            for name, path in write_reports(m).items():
                common.env().err.print(Text(f"{name}: {path}"))
            return
        if fmt is Format.term:
            if output is None:
                render_terminal(m, common.env().out)
                return
            buf = io.StringIO()
            render_terminal(m, SafeConsole(file=buf, width=120, no_color=True, highlight=False))
            text = buf.getvalue()
        else:
            text = render(m, fmt.value)
        if output is None and fmt is Format.html and sys.stdout.isatty():
            # 55 KB of HTML is no use on a terminal: the run's own report.html, and its path
            output = m.run_dir / "report.html"
        if output is None:
            _stdout(text)
            return
        try:
            write_text_atomic(output, text)
        except OSError as e:
            raise DdprobeError(f"cannot write {output}: {e.strerror or e}") from None
        common.env().err.print(Text(f"{m.run_id}: {fmt.value} report written to {output}"))


def _stdout(text: str) -> None:
    # not through rich: the document goes out byte for byte, never re-wrapped
    sys.stdout.write(text)
    sys.stdout.flush()
