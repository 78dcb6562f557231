"""`ddprobe smoke` in a terminal: each host's checks and their results."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ddprobe.report.style import status_rich

if TYPE_CHECKING:  # smoke writes its run's reports with report/: the type only
    from ddprobe.smoke import SmokeReport


def render_smoke(rep: SmokeReport, console: Console) -> None:
    """One row per host and check, then the exit code and the run dir."""
    t = Table(title=f"smoke {rep.run_id}", title_justify="left")
    for c in ("host", "check", "result", "detail"):
        t.add_column(c, overflow="fold")
    for hs in rep.hosts:
        for case in hs.cases:
            color = status_rich(case.status)
            detail = case.message or (case.output if case.name.startswith("probes") else "")
            t.add_row(hs.host, case.name, Text(case.status, style=color), detail[:200])
    console.print(t)
    console.print(f"exit {rep.exit_code}; wall {rep.wall_s:.1f} s; run dir {rep.run_dir}")
