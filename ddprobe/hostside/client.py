"""Run the host-side helper (`_hostops.py`) through a Remote: one round-trip per operation.

The helper's source goes as `python -c SRC OP` and its request as JSON on stdin, so nothing is
pasted into shell text. Its error kinds map to ddprobe errors here, in one place.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from ddprobe.errors import RemoteCommandError, ServerError
from ddprobe.remote import Remote

_HERE = Path(__file__).resolve().parent
PROGRAMS = {"ops": "ops.py", "lock": "lock.py"}


class HostOpError(ServerError):
    """A host operation failed for an infrastructure reason (never the server's fault)."""

    def __init__(self, message: str, *, kind: str = "io",
                 extra: dict[str, Any] | None = None) -> None:
        self.kind = kind
        self.extra = extra or {}
        super().__init__(message)


class PortInUseError(HostOpError):
    pass


class DiskFullError(HostOpError):
    pass


class AlreadyRunningError(HostOpError):
    pass


@functools.lru_cache(maxsize=4)
def helper_source(program: str = "ops") -> str:
    """_hostcommon's text, then the program's (its own `__future__` import dropped: that may
    only open a file): still one self-contained `python -c` program."""
    own = (_HERE / PROGRAMS[program]).read_text(encoding="utf-8")
    own = own.replace("from __future__ import annotations\n", "", 1)
    return (_HERE / "common.py").read_text(encoding="utf-8") + "\n\n" + own


def call(r: Remote, op: str, request: dict[str, Any], *, timeout: float = 60.0,
         program: str = "ops") -> dict[str, Any]:
    """Run one op of a helper program on the host; its result, or the matching error."""
    res = r.python(["-c", helper_source(program), op], input=json.dumps(request),
                   timeout=timeout)
    doc = None
    for line in reversed(res.stdout.splitlines()):
        if line.startswith("{") and '"ok"' in line:
            try:
                doc = json.loads(line)
            except (ValueError, RecursionError):
                continue
            break
    if doc is None:
        if res.exit_code == 127:
            raise HostOpError(f"{r.host.name}: the interpreter {r.host.python!r} was not found "
                              f"on the host (key 'python')", kind="config")
        raise RemoteCommandError(r.host.name, (r.host.python, "-c", "<ddprobe server helper>",
                                               op), res.exit_code, res.stdout, res.stderr)
    if doc.get("ok"):
        return dict(doc["result"])
    err = dict(doc.get("error") or {})
    kind = str(err.pop("kind", "io"))
    msg = f"{r.host.name}: {err.pop('message', 'host operation failed')}"
    cls = {"port_in_use": PortInUseError, "disk": DiskFullError,
           "running": AlreadyRunningError}.get(kind, HostOpError)
    raise cls(msg, kind=kind, extra=err)
