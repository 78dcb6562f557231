"""The `ddprobe` command: global options, the error boundary, and the command modules."""
from __future__ import annotations

import importlib
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Optional

import typer

from ddprobe import __version__, interrupt
from ddprobe.cli import clickerrors, common
from ddprobe.context import Context, Options, activate
from ddprobe.errors import DdprobeError
from ddprobe.exitcodes import ExitCode
from ddprobe.remote.base import PROGRAMS_LOG
from ddprobe.safeconsole import silence_stdout

app = typer.Typer(
    name="ddprobe", add_completion=True, no_args_is_help=True,
    pretty_exceptions_enable=False, rich_markup_mode="rich",
    help="Diagnose speculative-decoding deployments on GPU hosts: restart, probe, bisect.")

# Each module adds its commands with `register(app)`. One concept per module.
_MODULES = ["inventory", "facts", "testbed", "sources", "patch", "server", "probe", "run", "bisect",
            "report", "playbook", "smoke", "classify"]
# command -> module, so a command imports only what it needs (pandas, the AST analysis and the
# bisect engine cost ~1 s of start-up together).
_COMMANDS = {"hosts": "inventory", "facts": "facts", "testbed": "testbed", "grep": "sources",
             "grep-buffers": "sources", "flags": "sources", "patch": "patch", "server": "server",
             "probe": "probe", "run": "run", "bisect": "bisect", "sweep": "bisect",
             "report": "report", "playbook": "playbook", "smoke": "smoke",
             "classify": "classify"}
_VALUE_OPTS = {"--inventory", "-i", "--ssh-config", "--connect-timeout", "--limit", "-l"}
_registered: set[str] = set()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ddprobe {__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    ctx: typer.Context,
    inventory: Optional[str] = typer.Option(
        None, "--inventory", "-i", envvar="DDPROBE_INVENTORY",
        help="hosts.yaml (default: ./hosts.yaml, then ~/.config/ddprobe/hosts.yaml)."),
    ssh_config: Optional[str] = typer.Option(
        None, "--ssh-config", envvar="DDPROBE_SSH_CONFIG",
        help="ssh_config file (default ~/.ssh/config)."),
    accept_new_host_keys: bool = typer.Option(
        False, "--accept-new-host-keys",
        help="Record unknown host keys in the known_hosts file in use (never changed keys)."),
    connect_timeout: float = typer.Option(15.0, "--connect-timeout", help="SSH connect timeout."),
    limit: Optional[str] = typer.Option(
        None, "--limit", "-l", metavar="PATTERN",
        help="Restrict every --host to the hosts this pattern also matches (like "
             "`ansible --limit`), e.g. --limit 'b300*:!b300-2'."),
    verbose: int = typer.Option(
        0, "--verbose", "-v", count=True,
        help="-v: the commands run on hosts; -vv: every ddprobe debug log; -vvv: the SSH "
             "protocol too (paramiko)."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks and debug logs."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Show the version and exit."),
) -> None:
    if ctx.obj is None:  # invoked without `main` (CliRunner on get_app())
        ctx.obj = Context()
    env: Context = ctx.obj
    env.options = Options(inventory=inventory, ssh_config=ssh_config,
                          accept_new_host_keys=accept_new_host_keys, debug=debug,
                          connect_timeout=connect_timeout, limit=limit, verbose=verbose)
    ctx.call_on_close(activate(env))
    # the log handlers of --debug / -v are this invocation's: removed when it ends, so none
    # outlives it (a later one in the same process wrote to a stream closed meanwhile)
    ctx.call_on_close(_debug_logging() if debug else _verbosity(verbose))


def _attach(names: Sequence[str], fmt: str) -> Callable[[], None]:
    """One stderr handler (host text cleaned) on the named loggers at DEBUG; the function
    that puts them back as they were."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_CleanFormatter(fmt))
    before = [(lg, lg.level) for lg in map(logging.getLogger, names)]
    for lg, _ in before:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)

    def undo() -> None:
        for lg, level in before:
            lg.removeHandler(handler)
            lg.setLevel(level)
    return undo


def _debug_logging() -> Callable[[], None]:
    """--debug: every logger's debug records (the root logger's), with a timestamp."""
    return _attach([""], "%(asctime)s %(name)s %(message)s")


def _verbosity(level: int) -> Callable[[], None]:
    """-v: the commands run on hosts (ddprobe.remote), one line each; -vv: every ddprobe debug
    log and httpx; -vvv: paramiko's SSH protocol and the host programs' text too."""
    names = () if level <= 0 else ("ddprobe.remote",) if level == 1 else \
        ("ddprobe", "httpx") if level == 2 else ("ddprobe", "httpx", "paramiko", PROGRAMS_LOG)
    return _attach(names, "%(name)s: %(message)s")


class _CleanFormatter(logging.Formatter):
    """Debug logs quote host text (commands' output, log lines): never raw to the terminal."""

    def format(self, record: logging.LogRecord) -> str:
        from ddprobe.untrusted import clean
        return clean(super().format(record))


def _register(names: list[str]) -> None:
    """Import each command module (lazily: see _COMMANDS) and add its commands, once."""
    for name in names:
        if name not in _registered:
            importlib.import_module(f"ddprobe.cli.{name}").register(app)
            _registered.add(name)


def _command_of(args: list[str]) -> str | None:
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in _VALUE_OPTS:
            skip = True
            continue
        if a.startswith("-"):
            continue
        return a
    return None


def _completing() -> list[str] | None:
    """The words before the one being completed, under shell completion (bash: COMP_WORDS and
    COMP_CWORD; zsh and fish: _TYPER_COMPLETE_ARGS, the line so far); else None."""
    if not os.environ.get("_DDPROBE_COMPLETE"):
        return None
    if "COMP_WORDS" in os.environ:
        words = os.environ["COMP_WORDS"].split()
        try:
            cword = int(os.environ.get("COMP_CWORD", len(words)))
        except ValueError:
            cword = len(words)
        return words[1:cword]
    line = os.environ.get("_TYPER_COMPLETE_ARGS", "")
    words = line.split()
    return words[1:] if line.endswith(" ") else words[1:-1]


def _modules_for(args: list[str], cmd: str | None) -> list[str]:
    """The command modules this invocation needs: the command's own (a completion's too),
    none for `--version`, every one for the top-level help or a command name to complete."""
    before = _completing()
    if before is not None:
        cmd = _command_of(before)
    mod = _COMMANDS.get(cmd or "")
    if mod is not None and (before is not None or "--help" not in args[:1]):
        return [mod]
    if cmd is None and before is None and "--version" in args:
        return []
    return _MODULES


def get_app() -> typer.Typer:
    """The app with every command registered (for docs and CliRunner)."""
    _register(_MODULES)
    return app


def main(argv: list[str] | None = None) -> int:
    """Entry point with the one error boundary: DdprobeError -> one line + its exit code."""
    code = _main(sys.argv[1:] if argv is None else argv)
    try:  # what is still buffered: a reader that went away is not the command's result
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
        return int(ExitCode.CLOSED_PIPE)
    return code


def _main(args: list[str]) -> int:
    debug = "--debug" in args
    cmd = _command_of(args)
    env = Context()
    abort = _aborts_git_bisect(args)
    try:
        with interrupt.handling_sigint():
            return _dispatch(args, cmd, env, abort=abort)
    except DdprobeError as e:
        if debug:
            traceback.print_exc()
        env.err.print(common.error_line(e), highlight=False)
        code = int(ExitCode.BISECT_ABORT) if abort else int(e.exit_code)
        if "--json" in args:
            common.emit_json_error(str(e), code, type(e).__name__)
        return code
    except KeyboardInterrupt:
        env.err.print(interrupt.message(), highlight=False, markup=False)
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:  # `ddprobe report RUN | head -1`: never a verdict's exit code
        silence_stdout()
        return int(ExitCode.CLOSED_PIPE)


def _aborts_git_bisect(args: list[str]) -> bool:
    """--exit-protocol on the command line: `git bisect run` reads every exit code 1-127 but
    125 as "bad", so an error that stops ddprobe before its first cell (a usage error of
    click's or of ddprobe's, bad configuration, a bug) must abort it (128), whatever the
    protocol's value. The command maps the errors of a running bisect itself."""
    return any(a == "--exit-protocol" or a.startswith("--exit-protocol=") for a in args)


def _dispatch(args: list[str], cmd: str | None, env: Context, *, abort: bool = False) -> int:
    debug = "--debug" in args
    failed = int(ExitCode.BISECT_ABORT) if abort else None
    try:
        _register(_modules_for(args, cmd))
        from ddprobe.cli import helpdoc
        command = helpdoc.decorate(typer.main.get_command(app))
        rv = command.main(args=args, prog_name="ddprobe", standalone_mode=False, obj=env)
        if rv == ExitCode.INTERRUPTED and interrupt.stopping():
            # typer turns Ctrl-C into a silent Exit(130): say what was cleaned up
            raise KeyboardInterrupt
        return int(rv or 0)
    except SystemExit as e:
        if clickerrors.pipe_closed():
            raise BrokenPipeError from None
        return int(e.code or 0) if not isinstance(e.code, str) else 1
    except (DdprobeError, BrokenPipeError):
        raise
    except clickerrors.Exit as e:
        return int(e.exit_code)
    except clickerrors.Abort as e:  # click's KeyboardInterrupt: say what was cleaned up
        raise KeyboardInterrupt from e
    except clickerrors.ClickException as e:  # a usage error (unknown option, bad value...)
        e.show()
        if "--json" in args:
            common.emit_json_error(e.format_message(), failed or int(ExitCode.USAGE),
                                   "UsageError")
        return failed or int(ExitCode.USAGE)
    except Exception as e:
        if debug:
            traceback.print_exc()
        else:
            env.err.print(f"internal error: {type(e).__name__}: {e} (re-run with --debug for "
                          "the traceback)", markup=False, highlight=False)
        return failed or int(ExitCode.INTERNAL)
