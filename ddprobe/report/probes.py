"""A probe run against a server (`ddprobe probe`) in a terminal."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from ddprobe.probes.runner import ProbeReport


def render_probes(report: ProbeReport, out: Console) -> None:
    """`ddprobe probe`: a row per task, then the summary, garbage flags, notes, sandbox."""
    s = report.summary
    t = Table(title=f"{report.suite} probes: {report.base_url}")
    for col in ("task", "result", "tok/s", "accept", "latency", "why"):
        t.add_column(col, justify="right" if col in ("tok/s", "accept", "latency") else "left")
    for r in report.results:
        why = r.reason if not r.passed else ", ".join(r.garbage) or (r.divergence or "")
        t.add_row(r.task_id, Text("pass", style="green") if r.passed else Text("FAIL", style="red"),
                  _f(r.tok_s, 1), _f(r.accept_length, 2), _f(r.latency_s, 2), why)
    out.print(t)
    acc = f"{_f(s.accept_length, 2)} ({s.accept_source or 'not reported'})"
    out.print(Text.assemble((s.label, "bold"),
                            f"   accept length {acc}   server accept "
                            f"{_f(s.server_accept_length, 2)}   tok/s median {_f(s.tok_s, 1)}   "
                            f"aggregate {_f(s.aggregate_tok_s, 1)}   latency median "
                            f"{_f(s.latency_s, 2)} s   wall {report.wall_s:.1f} s "
                            f"(concurrency {report.concurrency})"))
    for f in s.garbage_flags:
        out.print(Text.assemble(("garbage:", "yellow"), f" {f}"))
    if s.divergence:
        out.print(Text.assemble(("divergence:", "yellow"), f" {s.divergence}"))
    for n in s.notes:
        out.print(f"note: {n}")
    if report.sandbox:
        out.print(f"sandbox: {report.sandbox} (answers' code ran on this machine; "
                  "docs/security.md)")


def _f(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}f}"
