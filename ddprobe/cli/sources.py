"""`ddprobe grep`, `ddprobe grep-buffers`, `ddprobe flags`: read an install's sources on a host."""
from __future__ import annotations

from typing import Any, Optional

import typer
from rich.text import Text

from ddprobe.cli import common, options
from ddprobe.errors import UsageError
from ddprobe.exitcodes import ExitCode
from ddprobe.report.sources import render_buffers, render_flags, render_grep, render_grep_hosts
from ddprobe.sources.buffers import SizingParams
from ddprobe.sources.fetch import grep_buffers, read_flags
from ddprobe.sources.grep import HostGrep, compare, grep, grep_hosts


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
        *,
        host: options.Hosts,
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
        as_json: options.Json = False,
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
                render_grep(res, common.env().out)
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
            render_grep_hosts(pattern, outs, rows, common.env().out)
            for o in outs:
                if o.result is None:
                    common.env().err.print(f"{o.host}: {o.status}: {o.error}", markup=False)
        if any(o.result is None for o in outs):
            raise typer.Exit(int(ExitCode.UNREACHABLE))
        if not rows:
            raise typer.Exit(int(ExitCode.FAILED))

    @app.command("grep-buffers")
    def grep_buffers_cmd(
        host: options.Hosts,
        backend: str = typer.Option("all", "--backend",
                                    help="An --attention-backend name (its classes follow the "
                                         "install's hierarchy) or all"),
        max_bs: Optional[int] = typer.Option(None, "--max-bs", help="CUDA-graph max batch size."),
        budgets: options.Budgets = None,
        context_len: options.ContextLen = None,
        topk: Optional[int] = typer.Option(None, "--topk", help="Speculative topk."),
        steps: Optional[int] = typer.Option(None, "--steps", help="Speculative num steps."),
        var: list[str] = typer.Option([], "--var", help="Other sizes, NAME=INT (e.g. "
                                      "num_head=32); repeatable."),
        flagged: bool = typer.Option(False, "--flagged", help="Only flagged buffers."),
        all_phases: bool = typer.Option(False, "--all-phases", help="Also per-batch "
                                        "temporaries (eager paths)."),
        as_json: options.Json = False,
    ) -> None:
        """List the buffers the install allocates for CUDA-graph capture/replay, with sizes."""
        h = common.one_host(host)
        params = None
        if budgets or max_bs is not None or context_len is not None or var:
            params = SizingParams(max_bs=max_bs, budgets=tuple(budgets or ()),
                                  context_len=context_len, topk=topk, num_steps=steps,
                                  extra=_vars(var))
        with common.env().connect(h) as r:
            rep = grep_buffers(r, h, backend=backend, params=params,
                               include_per_batch=all_phases)
        if as_json:
            common.emit_json({"host": h.name, **rep.to_dict()})
        else:
            render_buffers(rep, common.env().out, flagged_only=flagged)

    @app.command("flags")
    def flags_cmd(
        host: options.Hosts,
        check: Optional[str] = typer.Option(None, "--check", help="Check a launch argument "
                                            "string against this version, e.g. "
                                            "\"--cuda-graph-max-bs 64\"."),
        as_json: options.Json = False,
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
            render_flags(fs, common.env().out)
