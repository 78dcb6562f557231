"""The run in a terminal (rich): header, verdicts, the coloured budget x graph matrix, cells.

Every view draws from the run's one model (ddprobe/runmodel.py, built from the journal):
`render_terminal` is `ddprobe report`'s; `render_bisect` and `render_sweep` print what a bisect
or sweep just found (`ddprobe bisect`, `sweep`: the model they return is the journal's, so the
terminal says what the files say); `render_replay` prints `bisect replay`'s verdicts. Colours
and words come from report/style.py.
"""
from __future__ import annotations

import os
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

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
from ddprobe.report.timing import summary_line
from ddprobe.results import Verdict
from ddprobe.runmodel import HostMatrix, MatrixEntry, RunModel
from ddprobe.safeconsole import SafeConsole


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


def cells_table(m: RunModel) -> Table:
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


def render_terminal(m: RunModel, console: Console, *, cells: bool = True) -> None:
    """Print the run to `console` (the CLI passes its stdout console)."""
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


# --- what a bisect or sweep just found ---

def _wide(out: Console) -> Console:
    """stdout; piped output gets 80 columns from rich, too narrow for the verdict table (a
    COLUMNS the user set is honoured, as `report` honours it)."""
    if out.is_terminal or os.environ.get("COLUMNS"):
        return out
    return SafeConsole(file=out.file, width=max(out.width, 160), no_color=out.no_color,
                       highlight=False, soft_wrap=True)


def _verdict_table(title: str, multi: bool) -> Table:
    """The verdict table's columns: names and kinds are never cut or broken mid-word; the
    prose columns wrap at words."""
    t = Table(title=title, title_justify="left")
    for c in (["hosts"] if multi else []) + ["budgets", "verdict", "what", "decided by",
                                              "confidence"]:
        if c in ("what", "decided by"):
            t.add_column(c, overflow="fold", ratio=3 if c == "what" else 1)
        else:
            t.add_column(c, no_wrap=True, overflow="fold")
    return t


def render_bisect(m: RunModel, console: Console) -> None:
    """A finished bisect: the verdict table, then each verdict numbered with its evidence."""
    out = _wide(console)
    multi = len(m.groups) > 1
    t = _verdict_table(f"bisect {m.run_id}: budgets {','.join(map(str, m.budgets_asked))}",
                       multi)
    for v in m.verdicts:
        color = verdict_rich(v.kind)
        row = ([v.host or ""] if multi else []) + [
            ",".join(str(b) for b in v.budgets), f"[{color}]{v.label}[/{color}]",
            escape(what(v)), v.decided_by, v.confidence]
        t.add_row(*row)
    out.print(t, markup=True)
    shown = [v for v in m.verdicts if not (v.kind == "ok" and v.tested and
                                           len(m.verdicts) > 1)]
    for n, v in enumerate(shown, 1):  # numbered as printed: the list starts at 1
        head = f"[bold]{n}. b{',b'.join(map(str, v.budgets))}: {v.label}[/bold]"
        if v.signature:
            head += f"  [dim]{escape(failure_text(v.outcome, v.signature))}[/dim]"
        out.print(head, markup=True)
        for e in v.evidence:
            out.print(f"   - [cyan]{e.kind}[/cyan]: {escape(e.summary)}", markup=True)
        if v.patch_confirmed is not None:
            out.print(f"   - patch: {'fixes it' if v.patch_confirmed else 'does not fix it'}")
        out.print(f"   next: {v.next_step}")
        if v.would_decide:
            out.print(f"   would decide it: {v.would_decide}")
        if v.next_command:
            out.print(f"   run: {v.next_command}")
    for d in m.disagreement_details:
        out.print(f"[yellow]hosts disagree[/yellow] {escape(str(d.get('text', '')))}",
                  markup=True)
    line = summary_line(m.results)
    if line:
        out.print(line)
    out.print(f"restarts: {m.restarts_used} (this invocation {m.restarts_now}) vs "
              f"{m.restarts_full_sweep} for the full sweep (budgets x {{graph, eager}}); "
              f"rounds {m.rounds}; wall {m.wall_s or 0.0:.1f} s; run dir {m.run_dir}")


def what(v: Verdict) -> str:
    """A verdict's 'what' column: the buffer, the signature, or why it is assumed."""
    b = v.buffer or {}
    if v.latent:
        mem = next((e for e in v.evidence if e.kind == "memcheck"), None)
        return mem.summary if mem else v.decided_by
    if v.kind == "buffer_sizing" and b.get("attr"):
        return f"{b['attr']} ({b.get('where')})"
    if v.kind == "buffer_sizing" and b.get("attrs"):
        return ", ".join(b["attrs"])
    if v.kind == "buffer_sizing":
        m = next((e for e in v.evidence if e.kind == "max_bs"), None)
        return "fixed-capacity workspace" + (": a smaller max bs avoids it" if m else "")
    if v.kind == "ok":
        return ("passes with CUDA graphs" if v.tested else "assumed ok (not tested)") + \
            batches_note(v) + latent_note(v)
    if not v.tested:
        return f"assumed {v.kind} (not tested)"
    if v.kind == "inconclusive" and v.reason == "preload":
        return "fails before the model is loaded, in every config"
    return v.signature or v.outcome


def batches_note(v: Verdict) -> str:
    """`; vs eager at <= 16 requests (graphs up to 64 not compared)` for an ok whose
    comparison replayed only the graphs of small batches."""
    a = v.advice
    if a is None or a.compared_requests is None or a.captured_bs is None:
        return ""
    return (f"; vs eager at <= {a.compared_requests} requests (graphs up to {a.captured_bs} "
            "not compared)")


def latent_note(v: Verdict) -> str:
    """`; memcheck clean at b8` / `; latent check could not run (why)` for an ok verdict."""
    lat = [e.details for e in v.evidence if e.kind == "latent"]
    clean = [f"b{d['budget']}" for d in lat if d.get("latent") == "clean" and "budget" in d]
    out = "; memcheck clean at " + ", ".join(clean) if clean else ""
    for d in lat:
        if d.get("latent") == "off":
            out += f"; latent check off ({d.get('why', '')})"
        elif d.get("latent") == "not_run":
            where = f" at b{d['budget']}" if "budget" in d else ""
            out += f"; latent check could not run{where}" + (
                f" ({d['why']})" if d.get("why") else "")
    return out


def render_sweep(m: RunModel, console: Console) -> None:
    """A finished sweep: one row per budget, one column per variant."""
    out = _wide(console)
    t = Table(title=f"sweep {m.run_id}", title_justify="left")
    groups = sorted({r.group for r in m.sweep_rows})
    if len(groups) > 1:
        t.add_column("hosts")
    t.add_column("budget", justify="right")
    for v in m.sweep_variants:
        t.add_column(v, overflow="fold")
    for r in m.sweep_rows:
        cells = [r.group] if len(groups) > 1 else []
        cells.append(str(r.budget))
        for v in m.sweep_variants:
            e = r.entries.get(v)
            cells.append(_entry(e) if e else "-")
        t.add_row(*cells)
    out.print(t, markup=True)
    out.print(f"restarts: {m.restarts_used}; wall {m.wall_s or 0.0:.1f} s; run dir "
              f"{m.run_dir}")


def _entry(e: dict[str, Any]) -> str:
    out = e["outcome"]
    color = outcome_rich(out)
    parts = [f"[{color}]{out}[/{color}]"]
    if e.get("accept_length") is not None:
        parts.append(f"accept {e['accept_length']:.2f}")
    if e.get("tok_s") is not None:
        parts.append(f"{e['tok_s']:.0f} tok/s")
    if e.get("coding"):
        parts.append(f"coding {e['coding']}")
    if e.get("signature") and out != "ok":
        parts.append(f"[dim]{escape(e['signature'])}[/dim]")
    elif e.get("error") and out in ("error", "refused"):
        parts.append(f"[dim]{escape(e['error'])}[/dim]")
    if e.get("which_side"):  # a graph/eager divergence: what the cell deciding it showed
        parts.append(f"[dim]{escape(e['which_side'])}[/dim]")
    return " ".join(parts)


def render_replay(results: list[tuple[Any, Any, list[Verdict]]], console: Console) -> None:
    """`bisect replay`: per session of the log, the marks replayed and the verdicts."""
    for s, p, vs in results:
        marks = sum(len(r) for r in p.results.values())
        console.print(f"[bold]{escape(s.hosts)}[/bold]: {marks} marks replayed", markup=True)
        for v in vs:
            color = verdict_rich(v.kind)
            console.print(f"  b{',b'.join(map(str, v.budgets))}: [{color}]{v.label}"
                          f"[/{color}] ({v.decided_by}, {v.confidence}) "
                          f"{escape(what(v))}", markup=True)
