"""`ddprobe classify FILE|-`: classify a server log without running a cell (a log pasted from
a ticket): outcome, signature, phase, hint, and acceptance/throughput from its decode lines."""
from __future__ import annotations

import sys
from pathlib import Path

import typer

from ddprobe.cell.logverdict import classify_log, suspect
from ddprobe.cli import common, options
from ddprobe.errors import UsageError
from ddprobe.exitcodes import OUTCOME_EXIT, ExitCode
from ddprobe.report.logs import render_log_verdict

MAX_BYTES = 64 << 20  # a log bigger than this is read from its tail
# the outcome's exit code, as `ddprobe run` gives it (incomplete: the log cannot decide)
EXIT = {**OUTCOME_EXIT, "incomplete": ExitCode.INCONCLUSIVE}


def register(app: typer.Typer) -> None:
    app.command("classify")(classify)


def classify(
    path: str = typer.Argument(..., metavar="FILE|-", help="The log file, or - for stdin."),
    package: str = typer.Option("sglang", "--package",
                                help="The server package (a launch failure names it)."),
    as_json: options.Json = False,
) -> None:
    """Classify a server log: outcome, failure signature, phase, hint, decode-line acceptance.

    Examples:
      ddprobe classify server.log
      kubectl logs sglang-0 | ddprobe classify - --json
    """
    v = classify_log(_read(path), package=package)
    why = suspect(v)
    if as_json:
        common.emit_json({**v.to_dict(), "suspect": why})
    else:
        render_log_verdict(v, common.env().out, why)
    raise typer.Exit(int(EXIT[v.outcome]))


def _read(path: str) -> str:
    if path == "-":
        data = sys.stdin.buffer.read(MAX_BYTES + 1)[-MAX_BYTES:]
    else:
        p = Path(path).expanduser()
        if not p.is_file():
            raise UsageError(f"{path}: no such file (give a log file, or - for stdin)")
        try:
            with p.open("rb") as fh:
                size = p.stat().st_size
                if size > MAX_BYTES:
                    fh.seek(size - MAX_BYTES)
                data = fh.read(MAX_BYTES)
        except OSError as e:
            raise UsageError(f"{path}: cannot read it ({e.strerror})") from None
    return data.decode("utf-8", errors="replace")
