"""The run in a terminal (rich): header, verdicts, the coloured budget x graph matrix, cells."""
from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ddprobe.report.model import HostMatrix, MatrixEntry, ReportModel, build_model
from ddprobe.report.style import (
    buffer_shape,
    buffer_sizes,
    buffer_where,
    failure_text,
    fmt_accept,
    fmt_secs,
    fmt_tok_s,
    outcome_rich,
    restarts_line,
    verdict_rich,
    verdict_words,
)
from ddprobe.results import Verdict
from ddprobe.store import RunRecord


def _entry_text(e: MatrixEntry) -> Text:
    if e.outcome == "not-run":
        return Text("-", style="dim")
    t = Text(e.outcome, style=outcome_rich(e.outcome))
    extra = []
    if e.accept is not None:
        extra.append(f"acc {fmt_accept(e.accept)}")
    if e.tok_s is not None:
        extra.append(f"{fmt_tok_s(e.tok_s)} tok/s")
    if e.coding:
        extra.append(e.coding)
    if extra:
        t.append("  " + " ".join(extra))
    if e.signature and e.outcome != "ok":
        t.append("\n" + e.signature, style="dim")
    for v in e.variants:
        t.append(f"\n{v.variant or 'repeat'}: ", style="dim")
        t.append(v.outcome, style=outcome_rich(v.outcome))
    return t


def matrix_table(hm: HostMatrix, title: str | None = None) -> Table:
    t = Table(title=title, show_lines=True, title_justify="left")
    t.add_column("budget", justify="right", style="bold")
    for m in hm.modes:
        t.add_column(f"cuda graph {'on' if m == 'graph' else 'off'}")
    for b in hm.budgets:
        t.add_row(str(b), *(_entry_text(hm.get(b, m)) for m in hm.modes))
    return t


def _verdict_panel(n: int, v: Verdict) -> Panel:
    lines = Text()
    lines.append(failure_text(v.outcome, v.signature), style="bold")
    lines.append(f"\nconfidence {v.confidence}, decided by {v.decided_by}")
    if v.host:
        lines.append(f", host {v.host}")
    if v.buffer:
        b = v.buffer
        lines.append(f"\nbuffer {b.get('attr', '?')} at {buffer_where(b)}", style="bold")
        if buffer_shape(b):
            lines.append(f"  shape {buffer_shape(b)}")
        if buffer_sizes(b):
            lines.append(f"\n  sizes {buffer_sizes(b)}")
    if v.patch_confirmed is not None:
        lines.append("\npatch " + ("fixed it" if v.patch_confirmed else "did not fix it"),
                     style="green" if v.patch_confirmed else "red")
    for e in v.evidence:
        lines.append(f"\n  - {e.kind}: ", style="dim")
        lines.append(e.summary)
    if v.next_step:
        lines.append("\nnext: ", style="bold")
        lines.append(v.next_step)
    if v.would_decide:
        lines.append("\nwould decide it: ", style="bold")
        lines.append(v.would_decide)
    if v.next_command:
        lines.append("\nrun: ", style="bold")
        lines.append(v.next_command)
    title = Text(f"{n}. {verdict_words(v.label)}", style=verdict_rich(v.kind))
    title.append(f"  budget{'s' if len(v.budgets) != 1 else ''} "
                 f"{', '.join(map(str, v.budgets))}", style="bold")
    return Panel(lines, title=title, title_align="left", border_style=verdict_rich(v.kind))


def cells_table(m: ReportModel) -> Table:
    t = Table(title="cells", title_justify="left")
    for col, just in (("#", "right"), ("host", "left"), ("config", "left"),
                      ("outcome", "left"), ("signature", "left"), ("coding", "right"),
                      ("accept", "right"), ("tok/s", "right"), ("restart", "right"),
                      ("note", "left")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for c in m.cells:
        note = "; ".join(x for x in (c.variant, c.error or "") if x)
        t.add_row(str(c.index), c.host, c.key, Text(c.outcome, style=outcome_rich(c.outcome)),
                  c.signature or "", c.coding, fmt_accept(c.accept), fmt_tok_s(c.tok_s),
                  fmt_secs(c.restart_s), note)
    return t


def render_terminal(rec: RunRecord, console: Console, *, model: ReportModel | None = None,
                    cells: bool = True) -> None:
    """Print the run to `console` (the CLI passes its stdout console)."""
    m = model or build_model(rec)
    head = Text(f"{m.command or 'run'} {m.run_id}", style="bold")
    head.append(f"\nhosts {', '.join(m.hosts) or '-'}; budgets "
                f"{', '.join(map(str, m.budgets)) or '-'}; {len(m.cells)} cells; "
                f"{restarts_line(m.restarts_used, m.restarts_full_sweep)}")
    if not m.finished:
        head.append("\nunfinished: resume it with --resume " + m.run_id, style="yellow")
    console.print(head)
    parts = []
    for hm in m.matrices:
        parts.append(matrix_table(hm, title=f"{hm.host}: budget x CUDA graph"))
    if parts:
        console.print(Group(*parts), soft_wrap=False)
    for d in m.disagreements:
        console.print(Text(f"hosts disagree: {d}", style="yellow"))
    if not m.verdicts:
        console.print(Text("no verdicts recorded", style="dim"))
    for n, v in enumerate(m.verdicts, 1):
        console.print(_verdict_panel(n, v), soft_wrap=False)  # wrap inside the panel
    if cells and m.cells:
        console.print(cells_table(m), soft_wrap=False)
    for note in m.notes:
        console.print(Text(f"note: {note}", style="dim"))
