"""`ddprobe smoke` in a terminal: each host's checks and their results.

It reads a smoke check by its shape (`SmokeView`: `RunModel.smoke`, the run's journal read back,
has it, and so has `ddprobe.smoke.SmokeReport`): smoke writes its run's files with report/, so
report never imports smoke, not even for a type.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ddprobe.report.style import status_rich
from ddprobe.untrusted import first_chars

DETAIL_CAP = 200  # characters of a case's message the table shows


class CaseView(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def classname(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def time(self) -> float: ...
    @property
    def output(self) -> str: ...


class HostView(Protocol):
    @property
    def host(self) -> str: ...
    @property
    def cases(self) -> Sequence[CaseView]: ...
    @property
    def properties(self) -> dict[str, str]: ...
    @property
    def time(self) -> float: ...
    @property
    def timestamp(self) -> str: ...


class SmokeView(Protocol):
    @property
    def run_id(self) -> str: ...
    @property
    def run_dir(self) -> Path: ...
    @property
    def hosts(self) -> Sequence[HostView]: ...
    @property
    def wall_s(self) -> float: ...
    @property
    def exit_code(self) -> int: ...


def render_smoke(rep: SmokeView, console: Console) -> None:
    """One row per host and check, then the exit code and the run dir."""
    t = Table(title=f"smoke {rep.run_id}", title_justify="left")
    for c in ("host", "check", "result", "detail"):
        t.add_column(c, overflow="fold")
    for hs in rep.hosts:
        for case in hs.cases:
            color = status_rich(case.status)
            detail = case.message or (case.output if case.name.startswith("probes") else "")
            t.add_row(hs.host, case.name, Text(case.status, style=color),
                      first_chars(detail, DETAIL_CAP))
    console.print(t)
    console.print(f"exit {rep.exit_code}; wall {rep.wall_s:.1f} s; run dir {rep.run_dir}")
