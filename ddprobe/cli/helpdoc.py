"""Help pages: one real example per command, option panels, readable metavars.

`decorate(cmd)` runs over the built command tree before each invocation: it adds the example
of `EXAMPLES` to each command that has none in its docstring, puts every option in a rich help
panel (`PANELS`), and replaces typer's `<str>` / `<int range>` type labels with a metavar
that says what to type (`METAVARS`, else one from the option's name). Nothing here changes
what a command does. tests/test_cli_help.py checks every command against this table: each
has an example, each example names real options of its command, no `<...>` label is left.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# command path -> example lines (real: each names options the command has)
EXAMPLES: dict[str, tuple[str, ...]] = {
    "": ("ddprobe bisect --host testbed --budgets 8,16,32,64",
         "ddprobe -i inventory.ini --limit 'b300*' hosts --check"),
    "hosts": ("ddprobe hosts --check --host 'all:!rtxpro'",
              "ddprobe hosts --example gpu > hosts.yaml"),
    "facts": ("ddprobe facts --host b300 --json",),
    "grep": ("ddprobe grep 'cuda_graph_custom_mask' --host b300 --path srt/layers/attention",),
    "grep-buffers": ("ddprobe grep-buffers --host b300 --backend triton --max-bs 64 "
                     "--budgets 8,16,32 --context-len 4096",),
    "flags": ("ddprobe flags --host b300 --check '--cuda-graph-max-bs 16'",),
    "probe": ("ddprobe probe --host b300 --concurrency 8 --save-baseline b8.json",),
    "run": ("ddprobe run --host b300 --budget 16 --no-graph --tasks 8",),
    "sweep": ("ddprobe sweep --host b300 --budgets 8,16,32,64 --graph both",),
    "report": ("ddprobe report latest --format html -o report.html",),
    "smoke": ("ddprobe smoke --host b300 --junit smoke.xml",),
    "classify": ("ddprobe classify server.log --json",),
    "testbed": ("ddprobe testbed install --prefix /tmp/ddtestbed",),
    "testbed install": ("ddprobe testbed install --prefix /tmp/ddtestbed --force",),
    "testbed serve": ("ddprobe testbed serve --port 30000",),
    "patch": ("ddprobe patch list",),
    "patch apply": ("ddprobe patch apply sglang-0.5.10-triton-custom-mask --host b300 "
                    "--dry-run",),
    "patch revert": ("ddprobe patch revert --all --host b300",),
    "patch status": ("ddprobe patch status --host b300",),
    "patch recover": ("ddprobe patch recover --host b300 --apply",),
    "patch diff": ("ddprobe patch diff sglang-0.5.10-triton-custom-mask --host b300",),
    "patch list": ("ddprobe patch list --json",),
    "server": ("ddprobe server status --host b300",),
    "server start": ("ddprobe server start --host b300 --budget 8 --graph --wait",),
    "server restart": ("ddprobe server restart --host b300 --budget 16 --no-graph --wait",),
    "server stop": ("ddprobe server stop --host b300",),
    "server status": ("ddprobe server status --host b300 --json",),
    "server logs": ("ddprobe server logs --host b300 -n 200",),
    "bisect": ("ddprobe bisect --host b300 --budgets 8,16,32,64 --plan",
               "ddprobe bisect --host testbed --budgets 8,16 --confirm-patch "
               "ddtestbed-custom-mask"),
    "bisect replay": ("ddprobe bisect replay session.log --json",),
    "playbook": ("ddprobe playbook run playbooks/ddtree-graph-buffers.yaml --host b300 "
                 "--dry-run",),
    "playbook run": ("ddprobe playbook run playbooks/ddtree-graph-buffers.yaml --host b300",),
    "playbook actions": ("ddprobe playbook actions",),
}

# option (long name) -> panel; options not listed stay in "Options"
PANELS: dict[str, str] = {
    **dict.fromkeys(("--host", "--limit", "--inventory", "--ssh-config", "--accept-new-host-keys",
                     "--connect-timeout", "--break-lock", "--deadline", "--url"), "Hosts"),
    **dict.fromkeys(("--budgets", "--budget", "--graph", "--max-bs", "--backend", "--extra",
                     "--env", "--health-timeout", "--wait", "--keep-server", "--grace",
                     "--stop-after"), "Server config"),
    **dict.fromkeys(("--tasks", "--suite", "--concurrency", "--max-tokens", "--accept-tokens",
                     "--timeout", "--probe-timeout", "--baseline", "--save-baseline",
                     "--keep-answers"), "Probes"),
    **dict.fromkeys(("--repeat", "--graph-first", "--eager-first", "--confirm-patch",
                     "--no-latent-check", "--no-cheap-cells", "--sanitize", "--plan", "--resume",
                     "--exit-protocol", "--oversize-factor", "--thorough",
                     "--no-parallel", "--small-max-bs", "--suspect", "--order"), "Bisect plan"),
    **dict.fromkeys(("--json", "--junit", "--format", "--output", "--runs", "--log-dir",
                     "--verbose", "--debug", "--version"), "Output"),
}

# option (long name) -> metavar
METAVARS: dict[str, str] = {
    "--host": "PATTERN", "--limit": "PATTERN", "--budgets": "B,B,...", "--budget": "B",
    "--max-bs": "N", "--small-max-bs": "N", "--backend": "NAME", "--repeat": "N",
    "--confirm-patch": "PATCH", "--resume": "RUN_ID", "--exit-protocol": "bisect",
    "--tasks": "IDS|N|all", "--inventory": "FILE", "--ssh-config": "FILE",
    "--connect-timeout": "SECONDS", "--deadline": "SECONDS", "--timeout": "SECONDS",
    "--probe-timeout": "SECONDS", "--health-timeout": "SECONDS", "--grace": "SECONDS",
    "--junit": "FILE", "--baseline": "FILE", "--save-baseline": "FILE", "--output": "FILE",
    "--format": "term|md|json|csv|html", "--runs": "DIR", "--log-dir": "DIR",
    "--prefix": "DIR", "--suite": "FILE", "--concurrency": "N", "--max-tokens": "N",
    "--accept-tokens": "N", "--context-len": "N", "--topk": "N", "--steps": "N",
    "--var": "NAME=VALUE", "--extra": "ARGS", "--env": "NAME=VALUE", "--path": "DIR",
    "--context": "N", "--glob": "GLOB", "--tool": "rg|grep", "--url": "URL",
    "--graph": "both|on|off", "--lines": "N", "--since": "TIME", "--package": "NAME",
    "--stop-after": "PHASE", "--check": "FLAGS", "--order": "auto|eager-first|graph-first",
    "--oversize-factor": "N",
}


def _no_type(ctx: Any = None) -> None:
    return None


def complete_hosts(ctx: Any, param: Any, incomplete: str) -> list[str]:
    """Host and group names of the inventory, for `--host`/`--limit` (after `,`/`:`/`!`/`&`
    too: the pattern typed so far is kept)."""
    from ddprobe.inventory import load_inventory
    inv_path = None
    root = ctx.find_root() if ctx is not None else None
    if root is not None:
        inv_path = root.params.get("inventory")
    try:
        inv = load_inventory(inv_path)
    except Exception:
        return []
    cut = max(incomplete.rfind(c) for c in ",:!&") + 1
    head, word = incomplete[:cut], incomplete[cut:]
    names = [*inv.hosts, *inv.groups, "all"]
    return [head + n for n in sorted(set(names)) if n.startswith(word)]


def complete_runs(ctx: Any, param: Any, incomplete: str) -> list[str]:
    """Run ids under the runs directory (newest first), and `latest`."""
    from pathlib import Path

    from ddprobe.store import runs_root
    root = runs_root()
    if ctx is not None and ctx.params.get("runs"):
        root = Path(ctx.params["runs"])
    try:
        ids = sorted((d.name for d in root.iterdir() if (d / "journal.jsonl").is_file()),
                     reverse=True)
    except OSError:
        ids = []
    return [i for i in ["latest", *ids] if i.startswith(incomplete)]


COMPLETERS = {"--host": complete_hosts, "--limit": complete_hosts, "--resume": complete_runs,
              "run_id": complete_runs}


def walk(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command of the tree with its path (the root first)."""
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from walk(sub, (*path, name))


def long_name(param: Any) -> str:
    names = [o for o in [*param.opts, *param.secondary_opts] if o.startswith("--")]
    return names[0] if names else (param.opts[0] if param.opts else param.name or "")


def _metavar(param: Any) -> str | None:
    name = long_name(param)
    if name in METAVARS:
        return METAVARS[name]
    tname = getattr(getattr(param, "type", None), "name", "")
    if tname in ("integer", "integer range"):
        return "N"
    if tname in ("float", "float range"):
        return "X"
    if tname in ("path", "file"):
        return "FILE"
    return name.lstrip("-").upper().replace("-", "_") or None


def decorate(cmd: Any) -> Any:
    """Examples, panels and metavars on every command of the tree (see the module doc)."""
    for path, c in walk(cmd):
        ex = EXAMPLES.get(" ".join(path))
        if ex and "Example" not in (c.help or ""):
            c.epilog = "Example:\n\n" + "\n\n".join(f"    {line}" for line in ex)
        _no_help_metavar(c, path)
        for p in c.params:
            _decorate_param(p)
    return cmd


def _no_help_metavar(c: Any, path: tuple[str, ...]) -> None:
    """--help takes no value: no label beside it (best effort: click's Context is private in
    the typer versions that vendor click)."""
    try:
        from typer._click.core import Context
        h = c.get_help_option(Context(c, info_name=path[-1] if path else "ddprobe"))
        if h is not None:
            h.metavar = ""
    except Exception:
        pass


def _decorate_param(p: Any) -> None:
    """Its shell completer, and: an argument's metavar; an option's panel and metavar."""
    complete = COMPLETERS.get(long_name(p)) or COMPLETERS.get(p.name or "")
    if complete is not None and getattr(p, "_custom_shell_complete", None) is None:
        p._custom_shell_complete = complete
    if getattr(p, "param_type_name", "") == "argument":
        if p.metavar is None:
            p.metavar = (p.name or "ARG").upper()
        p.display_type_rich = _no_type  # the metavar says it; no `<str>` beside it
        return
    if getattr(p, "hidden", False):
        return
    if getattr(p, "rich_help_panel", None) is None and long_name(p) in PANELS:
        p.rich_help_panel = PANELS[long_name(p)]
    if p.metavar is None:
        flag = getattr(p, "is_flag", False) or getattr(p, "count", False)
        p.metavar = "" if flag else _metavar(p)  # a flag takes no value: no label
