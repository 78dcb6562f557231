"""Shared CLI plumbing: consoles, JSON output, host selection (the options: cli/options.py).

Only the CLI prints. stdout carries data (tables or JSON); messages and progress go to stderr.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.text import Text

from ddprobe.context import Context, current
from ddprobe.errors import ConfigError
from ddprobe.inventory import Host
from ddprobe.untrusted import clean, dumps_json


def env() -> Context:
    """The invocation's Context (ddprobe/context.py): the one `main` built and the global
    options filled in."""
    return current()


def hosts(spec: str) -> list[Host]:
    return env().hosts(spec)


def one_host(spec: str) -> Host:
    return env().one_host(spec)


def error_line(e: object) -> Text:
    """`error: <message>` with the message as plain text: an error often quotes host text
    (a METADATA version, a log line), which must never be read as markup."""
    return Text.assemble(("error:", "red"), " ", clean(str(e)))


def emit_json(data: Any) -> None:
    """Write one JSON document to stdout (never through rich, so nothing is re-wrapped)."""
    sys.stdout.write(dumps_json(data, indent=2, default=_default) + "\n")
    sys.stdout.flush()


def emit_json_error(message: str, exit_code: int, kind: str) -> None:
    """Under --json an error is a JSON document on stdout too (a script reads one shape):
    {"error": {"message", "kind", "exit_code"}}; the message line still goes to stderr."""
    emit_json({"error": {"message": clean(message), "kind": kind, "exit_code": exit_code}})


def _default(o: Any) -> Any:
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "__dataclass_fields__"):
        from dataclasses import asdict
        return asdict(o)
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


def read_json_file(path: str, what: str) -> Any:
    """A JSON file given on the command line; unreadable or invalid -> ConfigError (file:line)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read the {what}: {e.strerror}", path=path) from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"invalid JSON: {e.msg}", path=path, line=e.lineno) from None
