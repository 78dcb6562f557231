"""One cell in a terminal (`ddprobe run`): outcome and signature, probes, timings, notes, the
log excerpt of a failure; `run --differential`: both cells and their comparison; `server
start`: the status the server reached."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from ddprobe.probes.differential import DIVERGED, NOT_DECISIVE
from ddprobe.report.style import status_rich
from ddprobe.results import CellResult, Outcome

if TYPE_CHECKING:
    from ddprobe.cell.differential import DifferentialRun
    from ddprobe.cell.restart import StartReport


def _f(v: float | None, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def render_cell(c: CellResult, console: Console) -> None:
    col = status_rich(c.outcome.value)
    head = Text.assemble((c.host, "bold"), f" {c.config.key}: ", (c.outcome.value.upper(), col))
    if c.signature and c.outcome is not Outcome.OK:
        head.append(f"  {c.signature.id}")
    console.print(head, highlight=False)
    if c.error and (not c.signature or c.error not in c.signature.id):
        console.print(f"  {c.error}", markup=False, highlight=False)
    for line in _probe_lines(c):
        console.print(line, markup=False, highlight=False)
    if c.timings:
        console.print(_timings_line(c.timings), highlight=False)
    for line in _note_lines(c):
        console.print(line, markup=False, highlight=False)
    if c.log_excerpt and c.outcome is not Outcome.OK:
        console.print("  --- log excerpt ---", highlight=False)
        for line in c.log_excerpt:
            console.print(f"  | {line}", markup=False, highlight=False)


def _probe_lines(c: CellResult) -> list[str]:
    p = c.probes
    if p is None:
        return []
    lines = [f"  probes: {p.label}, accept length {_f(p.accept_length, '.2f')}"
             f" ({p.accept_source or 'not reported'}), server accept "
             f"{_f(p.server_accept_length, '.2f')}, tok/s {_f(p.tok_s)} (aggregate "
             f"{_f(p.aggregate_tok_s)}), latency {_f(p.latency_s, '.2f')} s"]
    lines += [f"  garbage: {g}" for g in p.garbage_flags]
    if p.divergence:
        lines.append(f"  divergence: {p.divergence}")
    return lines


def _timings_line(t: dict[str, float]) -> str:
    share = 100.0 * t.get("overhead", 0.0) / t["total"] if t.get("total") else 0.0
    return (f"  timings: restart {_f(t.get('restart'), '.2f')}s, health "
            f"{_f(t.get('health'), '.2f')}s, probe {_f(t.get('probe'), '.2f')}s, "
            f"total {_f(t.get('total'), '.2f')}s (ddprobe's own overhead "
            f"{_f(t.get('overhead'), '.2f')}s, {share:.0f}%)")


def _note_lines(c: CellResult) -> list[str]:
    """The cell's notes, its hint (a failure's), and where its server log is."""
    lines = [f"  note: {n}" for n in c.notes if n]
    if c.hint and c.outcome is not Outcome.OK:
        lines.append(f"  hint: {c.hint}")
    if c.log_path:
        local = c.local_log
        lines.append(f"  log: {c.log_path} (on the host)" + (f", copy: {local}" if local
                                                             else ""))
    return lines


def render_differential(pair: DifferentialRun, console: Console) -> None:
    """`run --differential`: the eager cell, the graph cell, and where their outputs differ."""
    render_cell(pair.eager, console)
    render_cell(pair.graph, console)
    d = pair.diff
    col = {DIVERGED: "red", NOT_DECISIVE: "yellow"}.get(d.status, "green")
    console.print(Text.assemble(("differential", col), ": ", d.summary), highlight=False)
    for x in d.diverged[:8]:
        console.print(f"  - {x.line()}", markup=False, highlight=False)
    if d.determinism:
        console.print(f"  determinism: {d.determinism}", markup=False, highlight=False)


def render_start(rep: StartReport, o: Console) -> None:
    """`ddprobe server start|restart`: the status it reached, the log, the notes."""
    col = status_rich(rep.status)
    what = Text.assemble((rep.host, "bold"), f" {rep.config.key}: ", (rep.status, col))
    if rep.elapsed is not None:
        what.append(f" after {rep.elapsed:.1f}s")
    if rep.signature and rep.status != "healthy":
        what.append(f"  {rep.signature.id}")
    o.print(what, highlight=False)
    if rep.error:
        o.print(f"  {rep.error}", markup=False, highlight=False)
    if rep.start:
        pg = f", pgid {rep.start.pgid}" if rep.start.pgid else ""
        o.print(f"  log: {rep.start.log_path}{pg}", markup=False, highlight=False)
    for n in rep.notes:
        o.print(f"  note: {n}", markup=False, highlight=False)
    for line in rep.log_excerpt:
        o.print(f"  | {line}", markup=False, highlight=False)
