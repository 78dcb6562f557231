"""Run the host helper program (`_hostmain` + `patchtext`) with the host's interpreter.

The program is sent as `python -c SRC OP` with its request as JSON on stdin: one round-trip per
operation, nothing pasted into shell text, and the analysed package is never imported.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddprobe.errors import (
    ConfigError,
    DdprobeError,
    LockedError,
    PatchError,
    RemoteCommandError,
    UsageError,
)
from ddprobe.remote import Remote

_HERE = Path(__file__).resolve().parent
_FUTURE = re.compile(r"^from __future__ import annotations\n", re.M)


# The helper program's parts, in order; later parts skip their imports of earlier ones.
_PARTS = ("patchtext.py", "sourceio.py", "ledger.py", "patch.py", "sourceops.py")
# What each op needs: a read or a grep carries neither the patch engine nor the ledger
# (less for the host's interpreter to compile on every call).
_OP_PARTS = {"locate": ("sourceio.py", "sourceops.py"), "read": ("sourceio.py", "sourceops.py"),
             "grep": ("sourceio.py", "sourceops.py"),
             "status": ("patchtext.py", "sourceio.py", "ledger.py", "sourceops.py"),
             "diff": ("patchtext.py", "sourceio.py", "ledger.py", "sourceops.py")}


@functools.cache
def helper_source(op: str | None = None) -> str:
    """The parts (all, or those `op` needs) as one program, one `from __future__` at the top."""
    parts = _OP_PARTS.get(op or "", _PARTS)
    body = "\n\n".join(_FUTURE.sub("", (_HERE / part).read_text(encoding="utf-8"))
                       for part in parts)
    return "from __future__ import annotations\n" + body


@dataclass(frozen=True)
class Install:
    """The package on a host, found through the host's interpreter (not imported)."""

    package: str
    version: str | None
    path: str  # the package directory
    site_packages: str  # the directory holding it (site-packages, or a PYTHONPATH entry)
    python: str
    python_version: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Install:
        return cls(package=d["package"], version=d.get("version"), path=d["path"],
                   site_packages=d["site_packages"], python=d["python"],
                   python_version=d.get("python_version", ""))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


_PATCH_KINDS = {"mismatch", "missing", "edited", "drift", "refused", "patch", "backup", "io",
                "unknown", "ledger"}


def run_helper(r: Remote, op: str, request: dict[str, Any], *, timeout: float = 120.0
               ) -> dict[str, Any]:
    """Run one op; return its result or raise the matching DdprobeError."""
    res = r.python(["-c", helper_source(op), op], input=json.dumps(request), timeout=timeout)
    last = None
    for line in reversed(res.stdout.splitlines()):
        if line.startswith("{") and '"ok"' in line:
            try:
                last = json.loads(line)
            except (ValueError, RecursionError):
                continue
            break
    if last is None:
        host = r.host.name
        if res.exit_code == 127 or "No such file" in res.stderr and r.host.python in res.stderr:
            raise ConfigError(f"{host}: the interpreter {r.host.python!r} was not found on the "
                              "host", key="python")
        raise RemoteCommandError(host, (r.host.python, "-c", "<ddprobe helper>", op),
                                 res.exit_code, res.stdout, res.stderr)
    if last.get("ok"):
        return dict(last["result"])
    err = last.get("error") or {}
    kind, msg = err.get("kind", ""), f"{r.host.name}: {err.get('message', 'helper failed')}"
    if kind == "locked":
        raise LockedError(msg)
    if kind == "not-installed":
        raise ConfigError(msg, key="package")
    if kind == "usage":
        raise UsageError(msg)
    if kind in _PATCH_KINDS:
        raise PatchError(msg)
    raise DdprobeError(msg)


def find_install(r: Remote, host: Any = None) -> Install:
    """Locate `host.package` with the host's interpreter (importlib.util.find_spec; version from
    importlib.metadata or its version.py). `host` defaults to the remote's own host entry."""
    h = host if host is not None else r.host
    return Install.from_dict(run_helper(r, "locate", {"package": h.package}, timeout=60))
