"""Live progress on stderr: one transient status line (a spinner, on a terminal) and the
lines a bisect or sweep prints while it runs (`EventRenderer`, fed the engine's events).

    with EventRenderer(err_console) as ren:
        model = run_bisect(hosts, req, on_event=ren, ...)
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from ddprobe.untrusted import clean, first_chars

STATUS_CAP = 150  # characters of the transient status line

if TYPE_CHECKING:  # rich.progress is imported by the first live status (not by a completion)
    from rich.progress import Progress, TaskID

    from ddprobe.bisect.engine import Event


def _duration(s: float) -> str:
    s = max(0, int(round(s)))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else \
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


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


class EventRenderer(LiveStatus):
    """Live progress on stderr: a spinner with the current cell (on a terminal), and a line
    per finished cell, per "restarts left" update, and per note. Thread-safe (rich's lock)."""

    def __init__(self, console: Console, *, quiet: bool = False) -> None:
        self.console, self.quiet = console, quiet
        self.live = console.is_terminal and not quiet
        self._lock = threading.Lock()
        self.done = 0  # cells finished (all groups)
        self.left: dict[str, int] = {}  # group -> restarts left (worst case)
        self.cell_s: list[float] = []  # wall time of each finished cell (restart + probes)

    def _counts(self) -> None:
        left = sum(self.left.values())
        mean = sum(self.cell_s) / len(self.cell_s) if self.cell_s else None
        self._set_counts(self.done, self.done + left if self.left else None,
                         None if mean is None else mean * left)

    def _line(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, highlight=False, markup=True)

    def _status(self, text: str) -> None:
        self._set_status(first_chars(text, STATUS_CAP))

    def __call__(self, e: Event) -> None:
        with self._lock:
            self._render(e)

    def _cell_done(self, e: Event, grp: str) -> None:
        """A finished cell: its line (outcome, time) and the counts."""
        from ddprobe.bisect.cells import describe
        from ddprobe.report.style import outcome_rich
        res = e.data.get("result")
        color = outcome_rich(res.outcome.value if res is not None else "?")
        secs = f" ({res.wall_s or 0:.0f} s)" if res is not None else ""
        self.done += 1
        if res is not None and res.wall_s:
            self.cell_s.append(float(res.wall_s))
        if e.group in self.left:
            self.left[e.group] = max(0, self.left[e.group] - 1)
        self._counts()
        self._line(f"{grp}[{color}]{escape(e.text)}: {escape(describe(res))}[/{color}]{secs}")

    def _render(self, e: Event) -> None:
        # the group's name, unless the line starts with it already (a one-host group is
        # named after its host: "testbed testbed: b16-graph" said it twice)
        grp = f"[dim]{escape(e.group)}[/dim] " if e.group and not (
            e.text.startswith(f"{e.group}:") or e.text.startswith(f"{e.group} ")) else ""
        if e.kind == "server":
            if self.live:
                self._status(e.text)
            elif "waiting for health" in e.text:
                self._line(f"  {escape(e.text)}")
        elif e.kind == "cell_start":
            self._status(e.text)
            if not self.live:
                self._line(f"{grp}running {escape(e.text)}")
        elif e.kind == "cell_done":
            self._cell_done(e, grp)
        elif e.kind == "progress":
            if "configs_left" in e.data:
                self.left[e.group] = int(e.data["configs_left"])
                self._counts()
            label = escape(str(e.data.get("label") or "Bisecting"))
            self._line(f"{grp}[bold]{label}:[/bold] {escape(e.text)}")
        elif e.kind == "verdict":
            self._line(f"{grp}[bold green]{escape(e.text)}[/bold green]")
        elif e.kind in ("plan", "static", "run", "round"):
            self._line(f"{grp}[dim]{escape(e.text)}[/dim]")
        else:
            self._line(f"{grp}[yellow]{escape(e.text)}[/yellow]")
