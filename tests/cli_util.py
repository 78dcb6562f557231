"""The CLI's command tree and a check that an example line names real options, shared by
tests/test_cli_help.py and tests/test_readme_commands.py."""
from __future__ import annotations

import shlex

import typer

from ddprobe.cli import get_app
from ddprobe.cli.helpdoc import decorate


def cli_tree():
    return decorate(typer.main.get_command(get_app()))


def check_example(line: str) -> None:
    """Walk an example's words like the parser: commands descend, each option must exist on
    the path so far, an option that takes a value consumes the next word."""
    words = shlex.split(line)
    assert words[0] == "ddprobe"
    c = cli_tree()
    params = {o: p for p in c.params for o in [*p.opts, *p.secondary_opts]}
    it = iter(words[1:])
    for w in it:
        if w.startswith("-") and w != "-":
            opt = w.split("=", 1)[0]
            assert opt in params or opt == "--help", f"example {line!r}: {opt} is not an " \
                "option there"
            p = params.get(opt)
            if p is not None and "=" not in w and not (getattr(p, "is_flag", False) or
                                                       getattr(p, "count", False)):
                next(it, None)
            continue
        sub = getattr(c, "commands", {}).get(w)
        if sub is not None:
            c = sub
            params |= {o: p for p in c.params for o in [*p.opts, *p.secondary_opts]}
