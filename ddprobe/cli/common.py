"""Shared CLI plumbing: global options, consoles, JSON output, host selection.

Only the CLI prints. stdout carries data (tables or JSON); messages and progress go to stderr.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.text import Text

from ddprobe.context import Context, current
from ddprobe.errors import ConfigError
from ddprobe.inventory import Host
from ddprobe.untrusted import clean, dumps_json


def env() -> Context:
    """The invocation's Context (ddprobe/context.py): the one `main` built and the global
    options filled in."""
    return current()


def hosts(spec: str) -> list[Host]:
    return env().hosts(spec)


def one_host(spec: str) -> Host:
    return env().one_host(spec)


def error_line(e: object) -> Text:
    """`error: <message>` with the message as plain text: an error often quotes host text
    (a METADATA version, a log line), which must never be read as markup."""
    return Text.assemble(("error:", "red"), " ", clean(str(e)))


def emit_json(data: Any) -> None:
    """Write one JSON document to stdout (never through rich, so nothing is re-wrapped)."""
    sys.stdout.write(dumps_json(data, indent=2, default=_default) + "\n")
    sys.stdout.flush()


def emit_json_error(message: str, exit_code: int, kind: str) -> None:
    """Under --json an error is a JSON document on stdout too (a script reads one shape):
    {"error": {"message", "kind", "exit_code"}}; the message line still goes to stderr."""
    emit_json({"error": {"message": clean(message), "kind": kind, "exit_code": exit_code}})


def _default(o: Any) -> Any:
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "__dataclass_fields__"):
        from dataclasses import asdict
        return asdict(o)
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


def task_words(text: str | None) -> tuple[str, ...]:
    """--tasks as given: ids (a comma list), one number N (the suite's first N) or 'all'
    (resolved by the suite: ddprobe.probes.coding.Suite.select); () when not given."""
    return tuple(t.strip() for t in (text or "").split(",") if t.strip())


TASKS_HELP = "Probe these coding tasks (comma-separated ids), the first N (a number), or 'all'"


HostOpt = typer.Option(..., "--host", "-H",
                       help="Host, group, or comma list (see `ddprobe hosts`).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document on stdout.")
BreakLockOpt = typer.Option(False, "--break-lock", help="Take over a stale host lock.")
KeepServerOpt = typer.Option(False, "--keep-server", help="Leave the last cell's server running.")


def _duration(s: float) -> str:
    s = max(0, int(round(s)))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else \
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


if TYPE_CHECKING:  # rich.progress is imported by the first live status (not by a completion)
    from rich.progress import Progress, TaskID


def live_progress(console: Console) -> tuple[Progress, TaskID]:
    """A started, transient spinner line on stderr. redirect_stdout=False: rich would otherwise
    move JSON written to stdout during the progress onto its console
    (docs/notes/remote-and-ci.md 5.1)."""
    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    p = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False),
                 BarColumn(bar_width=20), TextColumn("{task.fields[counts]}", markup=False),
                 TimeElapsedColumn(), console=console, transient=True, redirect_stdout=False,
                 redirect_stderr=False)
    p.start()
    return p, p.add_task("starting", total=None, counts="")


class LiveStatus:
    """A context manager for one transient status line on stderr, drawn only when `self.live`
    (a terminal). The bisect's event renderer and the cell's reporter build on it."""

    console: Console
    live: bool
    _progress: Progress | None = None
    _task: Any = None

    def __enter__(self) -> Any:
        if self.live:
            self._progress, self._task = live_progress(self.console)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def _set_counts(self, done: int, total: int | None, eta_s: float | None = None) -> None:
        """The overall bar: cells done of the planned total, and the time the rest may take."""
        if self._progress is None:
            return
        counts = f"{done}/{total} restarts" if total else f"{done} restarts"
        if eta_s is not None and total and total > done:
            counts += f", ~{_duration(eta_s)} left at most"
        self._progress.update(self._task, completed=done, total=total or None, counts=counts)

    def _set_status(self, text: str) -> bool:
        """Show text on the status line; False when there is none (not a terminal)."""
        if self._progress is None:
            return False
        self._progress.update(self._task, description=clean(text).replace("\n", " "))
        return True


def read_json_file(path: str, what: str) -> Any:
    """A JSON file given on the command line; unreadable or invalid -> ConfigError (file:line)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read the {what}: {e.strerror}", path=path) from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"invalid JSON: {e.msg}", path=path, line=e.lineno) from None
