"""`ddprobe testbed install|serve`: the built-in SGLang stand-in."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.text import Text

from ddprobe.cli import common, options
from ddprobe.errors import ConfigError, DdprobeError
from ddtestbed.install import InstallError, InstallResult, default_prefix, sync_testbed


def register(app: typer.Typer) -> None:
    """Add the `testbed` command group to the main app."""
    testbed = typer.Typer(help="The built-in SGLang stand-in (a testbed server with planted "
                               "defects).", no_args_is_help=True)
    testbed.command("install")(install)
    testbed.command(
        "serve",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                          "help_option_names": []},
        add_help_option=False,
    )(serve)
    app.add_typer(testbed, name="testbed")


def install(
    prefix: Optional[Path] = typer.Option(
        None, "--prefix", help="Install directory (default: the user data dir, "
                               "e.g. ~/.local/share/ddprobe/testbed)."),
    force: bool = typer.Option(
        False, "--force", help="Overwrite files that were modified since install (patches)."),
    suite: Optional[Path] = typer.Option(
        None, "--suite", help="Coding suite JSON to install (default: ddprobe's bundled one)."),
    as_json: options.Json = False,
) -> None:
    """Install or update the testbed as package `ddtestbed` under a prefix.

    Run it with: PYTHONPATH=PREFIX python -m ddtestbed.launch_server --model-path M --port P
    """
    result = _sync(prefix or default_prefix(), force=force, suite=suite)
    if as_json:
        common.emit_json({"prefix": str(result.prefix), "package_dir": str(result.package_dir),
                          "version": result.version, "changed": result.changed,
                          "written": list(map(str, result.written)),
                          "removed": list(map(str, result.removed)),
                          "kept_modified": list(map(str, result.kept_modified)),
                          "suite": None if result.suite is None else str(result.suite)})
        return
    _render(result)


def serve(ctx: typer.Context) -> None:
    """Run the in-tree testbed in the foreground; all arguments are SGLang launch flags.

    Example: ddprobe testbed serve --model-path sim --port 30000 --speculative-algorithm DDTREE
    --speculative-ddtree-budget 16 --testbed-scenario seed
    """
    from ddtestbed.launch_server import main

    try:
        code = main(list(ctx.args))
    except SystemExit as e:  # argparse usage errors exit 2, like SGLang's launcher
        code = e.code if isinstance(e.code, int) else 1
    raise typer.Exit(code)


def _sync(prefix: Path, *, force: bool, suite: Optional[Path]) -> InstallResult:
    try:
        return sync_testbed(prefix, force=force, suite=suite)
    except InstallError as e:
        if suite is not None and not suite.is_file():
            raise ConfigError(str(e), path=str(suite)) from None
        raise DdprobeError(str(e)) from None


def _render(result: InstallResult) -> None:
    out = common.env().out
    where = f"{result.package_dir} (ddtestbed {result.version})"
    if result.changed:
        out.print(f"installed {where}: {len(result.written)} written, "
                  f"{len(result.removed)} removed")
    else:
        out.print(f"up to date: {where}")
    for rel in result.kept_modified:
        out.print(Text.assemble(("kept locally modified file", "yellow"),
                                f" {rel} (use --force to replace)"))
    if result.suite is None:
        out.print(Text.assemble(("no coding suite found", "yellow"),
                                ": the model will only know generic text"))
    out.print(f"run: PYTHONPATH={result.prefix} python -m ddtestbed.launch_server "
              "--model-path sim --port 30000")
