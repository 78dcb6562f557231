"""`ddprobe playbook run FILE --host H [--dry-run] [--var k=v] [--keep-patches]`."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.text import Text

from ddprobe.bundled_files import bundled_playbooks, resolve_playbook
from ddprobe.cli import common, options
from ddprobe.exitcodes import ExitCode
from ddprobe.playbook import (
    Playbook,
    PlaybookResult,
    StepEvent,
    Template,
    builtin_registry,
    load_playbook,
    parse_var_overrides,
    run_playbook,
)
from ddprobe.playbook.schema import interpolate


def _value(v: Any) -> Text:
    if isinstance(v, Template):
        return Text(v.text, style="cyan").append(" (at run time)", style="dim")
    return Text(interpolate(v) if isinstance(v, (list, bool)) or v is None else str(v))


def _plan(pb: Playbook) -> int:
    """Print the steps with variables resolved; nothing runs. Returns the exit code."""
    out = common.env().out
    out.print(Text(f"playbook {pb.name} ({pb.path}), dry run: nothing is run", style="bold"))
    if pb.description:
        out.print(Text(pb.description, style="dim"))
    if pb.vars:
        out.print(Text("vars: ", style="bold").append(", ".join(
            f"{k}={interpolate(v)}" for k, v in pb.vars.items())))
    missing = 0
    for s in pb.steps:
        head = Text(f"{s.index:>2}. {s.name}", style="bold")
        head.append(f"  [{s.action}]", style="cyan")
        if s.spec.mutates:
            head.append("  changes the host", style="yellow")
        why = s.spec.unavailable()
        if why:
            missing += 1
            head.append(f"  NOT AVAILABLE: {why}", style="bold red")
        out.print(head)
        if s.when:
            out.print(Text("      when: ").append(s.when, style="magenta"))
        for k, v in s.args.items():
            arg = s.spec.arg(k)
            if v is None or (arg is not None and not isinstance(v, Template)
                             and v == arg.default):
                continue  # defaults are noise in a plan; `playbook actions` lists them
            out.print(Text(f"      {k}: ").append_text(_value(v)))
        for text, _ in s.asserts:
            out.print(Text("      assert: ").append(text, style="magenta"))
        if s.register:
            out.print(Text(f"      register: {s.register}", style="dim"))
        if s.ignore_errors:
            out.print(Text("      ignore_errors: true", style="dim"))
    return int(ExitCode.CONFIG) if missing else 0


def _progress(ev: StepEvent) -> None:
    s = ev.step
    label = f"step {s.index} {s.name}" if s else ""
    took = f" ({ev.elapsed_s:.1f}s)" if ev.elapsed_s is not None else ""
    line = {
        "start": Text(f"> {label} [{s.action if s else ''}] ...", style="dim"),
        "progress": Text(f"    {ev.message}", style="dim"),
        "ok": Text("ok ", style="green").append(f"{label}: {ev.message}{took}"),
        "skip": Text("-- ", style="dim").append(f"{label}: skipped, {ev.message}", style="dim"),
        "fail": Text("FAILED ", style="bold red").append(f"{label}: {ev.message}{took}"),
        "ignored": Text("failed (ignored) ", style="yellow").append(f"{label}: {ev.message}"),
        "revert": Text("reverted ", style="yellow").append(f"patch {ev.message} (a step failed)"),
        "revert-failed": Text("REVERT FAILED ", style="bold red").append(ev.message),
    }.get(ev.kind, Text(ev.message))
    common.env().err.print(line)


def _summary(res: PlaybookResult) -> None:
    """The result on stdout (the progress was on stderr): one line per step, then the verdict
    line; what was reverted or left applied follows on stderr."""
    out = common.env().out
    for s in res.steps:
        style = {"ok": "green", "failed": "bold red", "ignored": "yellow"}.get(s.status, "dim")
        out.print(Text(f"{s.status:<8}", style=style).append(
            f" step {s.index} {s.name} [{s.action}]"
            + (f": {s.summary}" if s.summary else "") + (f": {s.error}" if s.error else "")))
    if res.ok:
        out.print(Text(f"playbook {res.playbook} on {res.host}: ok ({len(res.steps)} steps); "
                       f"run {res.run_id}", style="bold green"))
    else:
        out.print(Text(f"playbook {res.playbook} on {res.host}: failed at step "
                       f"{res.failed_step}: {res.error}", style="bold red"))
    if res.reverted:
        common.env().err.print(Text(f"reverted: {', '.join(res.reverted)}"))
    if res.kept:
        common.env().err.print(Text(f"patches left applied: {', '.join(res.kept)} (`ddprobe patch "
                                    f"revert ID --host {res.host}` to undo)", style="yellow"))
    for e in res.revert_errors:
        common.env().err.print(Text(f"could not revert {e}", style="bold red"))


def register(app: typer.Typer) -> None:
    papp = typer.Typer(help="Run YAML playbooks: steps chaining facts, grep-buffers, patches, "
                            "sweeps, bisects and reports.", no_args_is_help=True)
    app.add_typer(papp, name="playbook")

    @papp.command("run")
    def run_cmd(
        file: Path = typer.Argument(..., help="The playbook: a file, or a shipped one by name "
                                    f"({', '.join(bundled_playbooks())})."),
        *,
        host: options.Hosts,
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the steps with variables "
                                     "resolved; run nothing."),
        var: Optional[list[str]] = typer.Option(None, "--var", help="Override a variable: "
                                                "NAME=VALUE (repeatable)."),
        keep_patches: bool = typer.Option(False, "--keep-patches", help="When a step fails, "
                                          "keep the patches the playbook applied."),
        runs: options.Runs = None,
        as_json: options.Json = False,
    ) -> None:
        """Check the whole playbook (errors name file:line), then run it step by step.

        A failing step stops the playbook and reverts every patch it applied.
        """
        h = common.one_host(host)
        pb = load_playbook(resolve_playbook(file), h, overrides=parse_var_overrides(var or []),
                           check_available=not dry_run)
        if dry_run:
            code = _plan(pb)
            if code:
                raise typer.Exit(code)
            return
        res = run_playbook(pb, h, opts=common.env().remote_options,
                           caches=common.env().caches, keep_patches=keep_patches,
                           on_event=None if as_json else _progress, runs_dir=runs)
        if as_json:
            common.emit_json(res.to_dict())
        else:
            _summary(res)
        if res.exit_code:
            raise typer.Exit(res.exit_code)

    @papp.command("actions")
    def actions_cmd(as_json: options.Json = False) -> None:
        """List the actions a step may use, with their arguments."""
        if as_json:
            common.emit_json({"actions": [
                {"name": spec.name, "help": spec.help, "unavailable": spec.unavailable(),
                 "args": [{"name": a.name, "kind": a.kind, "required": a.required,
                           "default": a.default} for a in spec.args]}
                for spec in builtin_registry().actions.values()]})
            return
        for spec in builtin_registry().actions.values():
            head = Text(spec.name, style="bold cyan").append(f"  {spec.help}")
            why = spec.unavailable()
            if why:
                head.append(f"  (not available: {why})", style="red")
            common.env().out.print(head)
            for a in spec.args:
                req = " (required)" if a.required else (
                    f" (default {interpolate(a.default)})" if a.default is not None else "")
                common.env().out.print(Text(f"    {a.name}: {a.kind}{req}", style="dim"))
