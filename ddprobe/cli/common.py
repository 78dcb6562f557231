"""Shared CLI plumbing: global options, consoles, JSON output, host selection.

Only the CLI prints. stdout carries data (tables or JSON); messages and progress go to stderr.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text

from ddprobe import remote
from ddprobe.errors import ConfigError
from ddprobe.inventory import Host, Inventory, load_inventory
from ddprobe.safeconsole import SafeConsole
from ddprobe.untrusted import clean, dumps_json


def _color() -> bool | None:
    if os.environ.get("NO_COLOR"):
        return False
    return None


PIPE_WIDTH = 400


def make_console(stderr: bool) -> Console:
    """The console: markup off and host text cleaned at render time (ddprobe/safeconsole.py)."""
    nc = bool(os.environ.get("NO_COLOR"))
    c = SafeConsole(stderr=stderr, no_color=nc, highlight=False, soft_wrap=True)
    if not stderr and not c.is_terminal and not os.environ.get("COLUMNS"):
        # stdout to a pipe or file: rich would cut tables at 80 columns
        c = SafeConsole(stderr=stderr, no_color=nc, highlight=False, soft_wrap=True,
                        width=PIPE_WIDTH)
    return c


out = make_console(stderr=False)
err = make_console(stderr=True)


@dataclass
class GlobalOptions:
    inventory: str | None = None
    ssh_config: str | None = None
    accept_new_host_keys: bool = False
    debug: bool = False
    connect_timeout: float = 15.0
    limit: str | None = None  # --limit PATTERN, applied to every --host
    verbose: int = 0  # -v count


OPTS = GlobalOptions()
_inventory: Inventory | None = None


def inventory() -> Inventory:
    global _inventory
    if _inventory is None:
        _inventory = load_inventory(OPTS.inventory)
    return _inventory


def reset() -> None:
    """Forget cached state (the CLI can be invoked many times in one process, e.g. tests)."""
    global _inventory, out, err
    _inventory = None
    out = make_console(stderr=False)
    err = make_console(stderr=True)


def apply_remote_options() -> None:
    remote.set_default_options(remote.RemoteOptions(
        ssh_config=OPTS.ssh_config, accept_new_host_keys=OPTS.accept_new_host_keys,
        connect_timeout=OPTS.connect_timeout))


def error_line(e: object) -> Text:
    """`error: <message>` with the message as plain text: an error often quotes host text
    (a METADATA version, a log line), which must never be read as markup."""
    return Text.assemble(("error:", "red"), " ", clean(str(e)))


def hosts(spec: str) -> list[Host]:
    return inventory().select(spec, OPTS.limit)


def one_host(spec: str) -> Host:
    return inventory().get(spec)


def emit_json(data: Any) -> None:
    """Write one JSON document to stdout (never through rich, so nothing is re-wrapped)."""
    sys.stdout.write(dumps_json(data, indent=2, default=_default) + "\n")
    sys.stdout.flush()


def _default(o: Any) -> Any:
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "__dataclass_fields__"):
        from dataclasses import asdict
        return asdict(o)
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


HostOpt = typer.Option(..., "--host", "-H", help="Host, group, or comma list (see `ddprobe hosts`).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document on stdout.")


def _duration(s: float) -> str:
    s = max(0, int(round(s)))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else \
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def live_progress(console: Console) -> tuple[Progress, TaskID]:
    """A started, transient spinner line on stderr. redirect_stdout=False: rich would otherwise
    move JSON written to stdout during the progress onto its console (REMOTE_AND_CI.md 5.1)."""
    p = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(),
                 console=console, transient=True, redirect_stdout=False, redirect_stderr=False)
    p.start()
    return p, p.add_task("starting", total=None)


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
        counts = f"{done}/{total} cells" if total else f"{done} cells"
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
