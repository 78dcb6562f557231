"""An install's sources in a terminal: `grep` hits (one host, or several side by side),
`grep-buffers`' buffer table and findings, `flags`' launch flags."""
from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ddprobe.safeconsole import SafeConsole
from ddprobe.sources.buffers import (
    FLAG_FIXED,
    FLAG_NONE,
    FLAG_SHORT,
    BufferReport,
    BufferRow,
    SizeAt,
)
from ddprobe.sources.flags import FlagSet
from ddprobe.sources.grep import Comparison, GrepResult, HostGrep


def _fmt_n(n: int | None) -> str:
    return "?" if n is None else f"{n:,}"


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} B"


def render_grep(res: GrepResult, console: Console) -> None:
    """grep's own format: `file:line:text` (a match), `file-line-text` (context), `--`."""
    last = None
    grouped = any(h.kind == "context" for h in res.hits)  # `--` between groups, like grep -C
    for h in res.hits:
        if grouped and last is not None and (h.file != last[0] or h.line > last[1] + 1):
            console.print(Text("--", style="dim"))
        sep = ":" if h.kind == "match" else "-"
        line = Text(f"{h.file}{sep}{h.line}{sep}", style="cyan" if h.kind == "match" else "dim")
        line.append(h.text)
        console.print(line)
        last = (h.file, h.line)


_FLAG_CODES = {FLAG_NONE: "N", FLAG_FIXED: "F", FLAG_SHORT: "S"}


def _wide(out: Console, renderable: object) -> None:
    # piped output gets 80 columns from rich: too narrow for a buffer table
    if out.is_terminal:
        out.print(renderable)
        return
    SafeConsole(file=out.file, width=max(out.width, 180), no_color=out.no_color, highlight=False,
            soft_wrap=False).print(renderable)


def render_buffers(rep: BufferReport, console: Console, *,
                   flagged_only: bool = False) -> None:
    """`grep-buffers`: the table of buffers and sizes per budget, then what matters."""
    budgets = rep.params.budgets if rep.params else ()
    title = f"CUDA-graph buffers: {rep.package} {rep.version or '?'} (backend {rep.backend})"
    t = Table(title=title, title_justify="left", show_lines=False)
    for c in ("buffer", "file:line", "allocated as", "dtype", "grows with"):
        t.add_column(c, overflow="fold")
    for b in budgets:
        t.add_column(f"b{b}", justify="right")
    t.add_column("flags")
    for r in rep.rows:
        if r.status != "found" or (flagged_only and not r.flags):
            continue
        cells = [Text(r.attr), Text(f"{r.file.rsplit('/', 1)[-1]}:{r.line}"),
                 Text(f"{r.allocator.rsplit('.', 1)[-1]}({r.shape})"),
                 Text(str(r.dtype or "-").replace("torch.", "")),
                 Text(", ".join(r.depends_on) or "-")]
        for sz in r.sizes:
            cells.append(Text(_fmt_bytes(sz.bytes) if sz.bytes is not None else
                              (_fmt_n(sz.elements) + " el" if sz.elements is not None else "?"),
                              style="red" if sz.short_by else ""))
        cells.append(Text("".join(_FLAG_CODES.get(f, "?") for f in r.flags), style="red"))
        t.add_row(*cells)
    _wide(console, t)
    console.print(Text("flags: N = set to None in one place, allocated in another; "
                                "F = fixed size but budget-dependent accesses; S = short at the "
                                "longest sequence a request reaches, for the budget", style="dim"))
    if budgets and rep.params is not None:
        console.print(Text(f"sizes for max_bs={rep.params.max_bs}, context_len="
                                    f"{rep.params.context_len}, draft tokens = budget + 1; "
                                    "? = needs --var NAME=N", style="dim"))
    if rep.seq_limit is not None:
        console.print(Text(f"the uses' layouts at the longest sequence: "
                                    f"{rep.seq_limit.text}", style="dim"))
    _render_findings(rep, console)


def _render_findings(rep: BufferReport, console: Console) -> None:
    p = console.print
    for r in rep.rows:
        if r.status != "found":
            p(Text(f"not found: {r.message}", style="yellow"))
    for r in rep.rows:
        if _matters(r):
            for line in _finding_lines(r):
                p(line)


def _matters(r: BufferRow) -> bool:
    """Details for what matters to the budget (and every buffer whose size was compared with
    its use: a cleared one shows the comparison that cleared it); a None-initialised index
    buffer is noise."""
    return r.status == "found" and (FLAG_FIXED in r.flags or FLAG_SHORT in r.flags or (
        FLAG_NONE in r.flags and r.grows_with_budget) or r.demand is not None)


def _finding_lines(r: BufferRow) -> list[Text]:
    head = Text(f"\n{r.attr}", style="bold")
    head.append(f"  ({r.file}:{r.line}, {r.scope})")
    lines = [head, Text(f"  allocated: {r.allocator}({r.shape}, dtype={r.dtype})")]
    if r.via:
        lines.append(Text(f"  via: {r.via}"))
    if r.resolved:
        lines.append(Text(f"  = {r.resolved}"))
    lines += [Text(f"    {n}", style="dim") for n in r.notes]
    if r.conditions:
        lines.append(Text(f"  only when: {' and '.join(r.conditions)}", style="dim"))
    if FLAG_NONE in r.flags:
        lines += [Text(f"  set to None at {site}; really allocated at {r.file}:{r.line} "
                       f"({r.scope})") for site in r.none_sites]
    if FLAG_FIXED in r.flags:
        lines.append(Text("  its size does not depend on the draft tokens, but these accesses "
                          "do:", style="red"))
        lines += [Text(f"    {u}") for u in r.growing_uses]
    if r.demand:
        lines.append(Text(f"  the use's layout: {r.demand}"))
    lines += [_size_line(s) for s in r.sizes]
    if FLAG_SHORT in r.flags:
        lines.append(Text("  -> undersized for long sequences at these budgets: a candidate "
                          "for the buffer-sizing verdict", style="red"))
    elif r.demand and r.sizes and all(s.demand_elements is not None for s in r.sizes):
        lines.append(Text("  -> cleared: the allocation holds the use's layout at the longest "
                          "sequence at every budget", style="green"))
    return lines


def _size_line(s: SizeAt) -> Text:
    line = Text(f"  budget {s.budget} (draft tokens {s.draft_tokens}): "
                f"{_fmt_n(s.elements)} elements, {_fmt_bytes(s.bytes)}")
    if s.demand_elements is not None:
        line.append(f"; the layout needs {_fmt_n(s.demand_elements)} at seq_len {s.seq_len}")
    if s.short_by:
        line.append(f"; SHORT by {_fmt_n(s.short_by)}", style="red")
    elif s.demand_elements is not None and s.elements is not None:
        line.append(f"; fits ({_fmt_n(s.elements - s.demand_elements)} to spare)")
    if s.short_at_context:
        line.append(f"; short by {_fmt_n(s.short_at_context)} only at seq_len = context_len, "
                    "which no request reaches: not a suspect", style="dim")
    if s.missing:
        line.append(f"; unknown: {', '.join(s.missing)} (give --var NAME=N)", style="dim")
    return line


def render_flags(fs: FlagSet, console: Console) -> None:
    """`flags`: every launch flag the install defines."""
    t = Table(title=f"launch flags: {fs.package} {fs.version or '?'} ({len(fs.flags)} flags)")
    for c in ("flag", "aliases", "takes", "choices", "default", "defined at"):
        t.add_column(c, overflow="fold")
    for f in fs.flags:
        takes = f.action or f.type or "value"
        if f.nargs:
            takes += f" nargs={f.nargs}"
        ch = ", ".join(f.choices[:8]) + (" ..." if f.choices and len(f.choices) > 8 else "") \
            if f.choices else ""
        t.add_row(Text(f.name + (" (deprecated)" if f.deprecated else "")),
                  Text(", ".join(f.names[1:])), Text(takes), Text(ch), Text(f.default or ""),
                  Text(f"{f.file}:{f.line}"))
    _wide(console, t)


def render_grep_hosts(pattern: str, outs: Sequence[HostGrep], rows: Sequence[Comparison],
                      console: Console) -> None:
    """`grep` on several hosts: one row per matching line, its line number on each host
    (yellow where the hosts differ)."""
    ok = [o for o in outs if o.result is not None]
    t = Table(title=f"grep {pattern!r} on {len(outs)} hosts")
    t.add_column("file", overflow="fold")
    t.add_column("text", overflow="fold")
    for o in ok:
        assert o.result is not None
        t.add_column(f"{o.host}\n{o.result.install.version}", justify="right")
    for c in rows:
        style = "yellow" if c.differs else ""
        t.add_row(Text(c.file), Text(c.text), *[
            Text(str(c.lines[o.host]) if c.lines[o.host] is not None else "-",
                 style=style) for o in ok])
    console.print(t)
