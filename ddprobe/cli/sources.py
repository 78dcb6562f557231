"""`ddprobe grep`, `ddprobe grep-buffers`, `ddprobe flags`: read an install's sources on a host."""
from __future__ import annotations

from typing import Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from ddprobe.cli import common
from ddprobe.errors import UsageError
from ddprobe.exitcodes import ExitCode
from ddprobe.safeconsole import SafeConsole
from ddprobe.sources.buffers import (
    FLAG_FIXED,
    FLAG_NONE,
    FLAG_SHORT,
    BufferReport,
    BufferRow,
    SizeAt,
    SizingParams,
)
from ddprobe.sources.fetch import grep_buffers, read_flags
from ddprobe.sources.flags import FlagSet
from ddprobe.sources.grep import GrepResult, HostGrep, compare, grep, grep_hosts


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise UsageError(f"{what}: expected comma-separated integers, got {text!r}") from None
    if any(v < 0 for v in vals):
        raise UsageError(f"{what}: values must be >= 0")
    return vals


def _vars(items: list[str]) -> tuple[tuple[str, int], ...]:
    out = []
    for it in items:
        name, eq, val = it.partition("=")
        if not eq or not name.isidentifier():
            raise UsageError(f"--var {it!r}: expected NAME=INT, e.g. --var num_head=32")
        try:
            out.append((name, int(val)))
        except ValueError:
            raise UsageError(f"--var {it!r}: {val!r} is not an integer") from None
    return tuple(out)


def _fmt_n(n: int | None) -> str:
    return "?" if n is None else f"{n:,}"


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} B"


def render_grep(res: GrepResult) -> None:
    last = None
    grouped = any(h.kind == "context" for h in res.hits)  # `--` between groups, like grep -C
    for h in res.hits:
        if grouped and last is not None and (h.file != last[0] or h.line > last[1] + 1):
            common.env().out.print(Text("--", style="dim"))
        sep = ":" if h.kind == "match" else "-"
        line = Text(f"{h.file}{sep}{h.line}{sep}", style="cyan" if h.kind == "match" else "dim")
        line.append(h.text)
        common.env().out.print(line)
        last = (h.file, h.line)


_FLAG_CODES = {FLAG_NONE: "N", FLAG_FIXED: "F", FLAG_SHORT: "S"}


def _wide(renderable: object) -> None:
    # piped output gets 80 columns from rich: too narrow for a buffer table
    out = common.env().out
    if out.is_terminal:
        out.print(renderable)
        return
    SafeConsole(file=out.file, width=max(out.width, 180), no_color=out.no_color, highlight=False,
            soft_wrap=False).print(renderable)


def render_buffers(rep: BufferReport, *, flagged_only: bool = False) -> None:
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
    _wide(t)
    common.env().out.print(Text("flags: N = set to None in one place, allocated in another; "
                                "F = fixed size but budget-dependent accesses; S = short at the "
                                "longest sequence a request reaches, for the budget", style="dim"))
    if budgets and rep.params is not None:
        common.env().out.print(Text(f"sizes for max_bs={rep.params.max_bs}, context_len="
                                    f"{rep.params.context_len}, draft tokens = budget + 1; "
                                    "? = needs --var NAME=N", style="dim"))
    if rep.seq_limit is not None:
        common.env().out.print(Text(f"the uses' layouts at the longest sequence: "
                                    f"{rep.seq_limit.text}", style="dim"))
    _render_findings(rep)


def _render_findings(rep: BufferReport) -> None:
    p = common.env().out.print
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


def render_flags(fs: FlagSet) -> None:
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
    _wide(t)


def _grep_json(outs: list[HostGrep]) -> None:
    """`grep --json`: one shape for one host and for many."""
    common.emit_json({"hosts": [{"host": o.host, "status": o.status, "error": o.error,
                                 "result": o.result.to_dict() if o.result else None}
                                for o in outs],
                      "compare": [{"file": c.file, "text": c.text, "lines": c.lines,
                                   "differs": c.differs} for c in compare(outs)]})


def register(app: typer.Typer) -> None:
    @app.command("grep")
    def grep_cmd(
        pattern: str = typer.Argument(..., help="Regular expression (or text with -F)."),
        host: str = common.HostOpt,
        path: Optional[str] = typer.Option(None, "--path", help="Subdirectory or file of the "
                                           "package, e.g. srt/layers/attention."),
        context: int = typer.Option(0, "-C", "--context", help="Lines of context."),
        fixed: bool = typer.Option(False, "--fixed-strings", "-F", help="PATTERN is text."),
        ignore_case: bool = typer.Option(False, "--ignore-case", "-i",
                                         help="Match case-insensitively."),
        glob: list[str] = typer.Option([], "--glob", "-g", help="Only files matching (e.g. "
                                       "'*.py'); repeatable."),
        tool: str = typer.Option("auto", "--tool", help="auto (ripgrep where the host has it, "
                                 "else grep), rg or grep."),
        as_json: bool = common.JsonOpt,
    ) -> None:
        """Search the host's installed package (ripgrep if present, else grep)."""
        if tool not in ("auto", "rg", "grep"):
            raise typer.BadParameter("must be auto, rg or grep", param_hint="--tool")
        hs = common.hosts(host)
        kw: dict[str, Any] = {"subdir": path, "context": context, "fixed": fixed,
                              "ignore_case": ignore_case, "include": glob, "tool": tool}
        if len(hs) == 1:
            with common.env().connect(hs[0]) as r:
                res = grep(r, pattern, host=hs[0], **kw)
            if as_json:  # the shape of several hosts, with one: scripts read one shape
                _grep_json([HostGrep(hs[0].name, "ok", res, None)])
            else:
                render_grep(res)
                common.env().err.print(f"{hs[0].name}: {len(res.matches)} match(es) in "
                                       f"{res.install.package} {res.install.version} ({res.tool}, "
                                       f"{res.dialect or '?'})"
                                       + (" [truncated]" if res.truncated else ""), markup=False)
            if not res.matches:
                raise typer.Exit(int(ExitCode.FAILED))
            return
        outs = grep_hosts(hs, pattern, opts=common.env().remote_options, **kw)
        rows = compare(outs)
        if as_json:
            _grep_json(outs)
        else:
            ok = [o for o in outs if o.result is not None]
            t = Table(title=f"grep {pattern!r} on {len(hs)} hosts")
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
            common.env().out.print(t)
            for o in outs:
                if o.result is None:
                    common.env().err.print(f"{o.host}: {o.status}: {o.error}", markup=False)
        if any(o.result is None for o in outs):
            raise typer.Exit(int(ExitCode.UNREACHABLE))
        if not rows:
            raise typer.Exit(int(ExitCode.FAILED))

    @app.command("grep-buffers")
    def grep_buffers_cmd(
        host: str = common.HostOpt,
        backend: str = typer.Option("all", "--backend",
                                    help="An --attention-backend name (its classes follow the "
                                         "install's hierarchy) or all"),
        max_bs: Optional[int] = typer.Option(None, "--max-bs", help="CUDA-graph max batch size."),
        budgets: Optional[str] = typer.Option(None, "--budgets", help="Draft budgets, e.g. "
                                              "8,16,32 (draft tokens = budget + 1)."),
        context_len: Optional[int] = typer.Option(None, "--context-len",
                                                  help="Model context length."),
        topk: Optional[int] = typer.Option(None, "--topk", help="Speculative topk."),
        steps: Optional[int] = typer.Option(None, "--steps", help="Speculative num steps."),
        var: list[str] = typer.Option([], "--var", help="Other sizes, NAME=INT (e.g. "
                                      "num_head=32); repeatable."),
        flagged: bool = typer.Option(False, "--flagged", help="Only flagged buffers."),
        all_phases: bool = typer.Option(False, "--all-phases", help="Also per-batch "
                                        "temporaries (eager paths)."),
        as_json: bool = common.JsonOpt,
    ) -> None:
        """List the buffers the install allocates for CUDA-graph capture/replay, with sizes."""
        h = common.one_host(host)
        params = None
        if budgets or max_bs is not None or context_len is not None or var:
            params = SizingParams(max_bs=max_bs, budgets=_ints(budgets or "", "--budgets"),
                                  context_len=context_len, topk=topk, num_steps=steps,
                                  extra=_vars(var))
        with common.env().connect(h) as r:
            rep = grep_buffers(r, h, backend=backend, params=params,
                               include_per_batch=all_phases)
        if as_json:
            common.emit_json({"host": h.name, **rep.to_dict()})
        else:
            render_buffers(rep, flagged_only=flagged)

    @app.command("flags")
    def flags_cmd(
        host: str = common.HostOpt,
        check: Optional[str] = typer.Option(None, "--check", help="Check a launch argument "
                                            "string against this version, e.g. "
                                            "\"--cuda-graph-max-bs 64\"."),
        as_json: bool = common.JsonOpt,
    ) -> None:
        """The launch flags the host's installed server_args.py defines (read, not imported)."""
        import shlex
        h = common.one_host(host)
        with common.env().connect(h) as r:
            fs = read_flags(r, h)
        if check is not None:
            try:
                argv = shlex.split(check)
            except ValueError as e:
                raise UsageError(f"--check: {e}") from None
            fs.check(argv)  # RefusedError -> exit 7 with the reason and the nearest flag
            if as_json:
                common.emit_json({"host": h.name, "ok": True, "argv": argv,
                                  "version": fs.version})
            else:
                common.env().out.print(Text(f"ok: {fs.package} {fs.version} accepts: {check}"))
            return
        if as_json:
            common.emit_json({"host": h.name, **fs.to_dict()})
        else:
            render_flags(fs)
