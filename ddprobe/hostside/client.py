"""The one client of the host programs: ship a program's text, run one op, map its answer.

A program is a list of modules of this package (standard library only, Python 3.8+), sent as
ONE text: their sources concatenated, each one's `from __future__` import dropped and one put at
the top (`hostside.common`, the protocol and its one main loop, first). The host runs the small
fixed `BOOT` text as `python -c BOOT OP`; the program comes on stdin (one line with its size in
bytes, then its text), the request as JSON after it. So a program's size has no cliff (Linux
refuses one argument over 128 KiB, E2BIG, and over SSH the whole command is one argument to the
user's shell), no request value is pasted into shell text, and the analysed package is never
imported. The answer is the last stdout line
`{"ok": true, "result": {...}}` or `{"ok": false, "error": {"kind": ..., ...}}`, read under
the program's size cap; an error kind maps to a ddprobe exception in `hostside.errors`, the
one table. What a host sends back is untrusted: the caller validates the result into its
typed record.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddprobe.hostside.errors import host_error
from ddprobe.remote import Remote
from ddprobe.remote.agent import MAX_REPLY_BYTES
from ddprobe.remote.base import BOOT, program_input
from ddprobe.untrusted import clean

__all__ = ["BOOT", "HostAnswer", "call", "program_input", "program_source"]

_HERE = Path(__file__).resolve().parent
_FUTURE = re.compile(r"^from __future__ import annotations\n", re.M)
_SOURCES = ("common.py", "patchtext.py", "sourceio.py", "ledger.py", "patch.py", "sourceops.py")
_SOURCES_READ = ("common.py", "sourceio.py", "sourceops.py")
_SOURCES_LEDGER = ("common.py", "patchtext.py", "sourceio.py", "ledger.py", "sourceops.py")
_MIB = 1 << 20


@dataclass(frozen=True)
class Program:
    """A host program: its modules in order (`common.py`, the protocol, first), the subset an
    op needs, how its errors map, and the most an answer line may hold."""

    parts: tuple[str, ...]
    family: str  # its row group in hostside.errors.ERRORS
    label: str  # stands for the program text in a RemoteCommandError's argv
    default_message: str
    timeout: float
    default_kind: str  # an error answer without a kind
    max_answer: int  # bytes of the answer line; a longer one is the kind `oversize`
    # what an op needs, when less than all (less for the host's interpreter to compile)
    op_parts: dict[str, tuple[str, ...]] = field(default_factory=dict)


PROGRAMS = {
    # a tail reads up to 4 MiB of log; JSON writes a control byte as 6 (\u0000)
    "ops": Program(("common.py", "ops.py"), "server", "<ddprobe server helper>",
                   "host operation failed", 60.0, "io", 32 * _MIB),
    "lock": Program(("common.py", "lock.py"), "server", "<ddprobe server helper>",
                    "host operation failed", 60.0, "io", _MIB),
    "sources": Program(_SOURCES, "sources", "<ddprobe helper>", "helper failed", 120.0, "",
                       MAX_REPLY_BYTES,
                       {"locate": _SOURCES_READ, "read": _SOURCES_READ, "grep": _SOURCES_READ,
                        "status": _SOURCES_LEDGER, "diff": _SOURCES_LEDGER}),
    "preflight": Program(("common.py", "preflight.py"), "preflight", "<ddprobe preflight>",
                         "preflight failed", 300.0, "", 8 * _MIB),
    "facts": Program(("common.py", "facts.py"), "facts", "<ddprobe facts>",
                     "facts program failed", 60.0, "", _MIB),
    "kernel_log": Program(("common.py", "kernellog.py"), "kernel_log", "<ddprobe kernel log>",
                          "kernel log program failed", 30.0, "", 256 << 10),
}


@functools.cache
def program_source(program: str = "ops", op: str | None = None) -> str:
    """The modules of `program` (those `op` needs) as one text, one `from __future__` on top."""
    prog = PROGRAMS[program]
    parts = prog.op_parts.get(op or "", prog.parts)
    body = "\n\n".join(_FUTURE.sub("", (_HERE / part).read_text(encoding="utf-8"))
                       for part in parts)
    return "from __future__ import annotations\n" + body


class _Oversize(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def _answer(stdout: str, cap: int) -> dict[str, Any] | None:
    """The last `{"ok": ...}` line that parses (progress lines and stray output come before);
    `_Oversize` when that line is over `cap` bytes (it is not parsed)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{") and '"ok"' in line[:16]:
            if len(line) > cap:
                raise _Oversize(len(line))
            try:
                doc = json.loads(line)
            except (ValueError, RecursionError):
                continue
            return doc if isinstance(doc, dict) else None
    return None


class HostAnswer(dict[str, Any]):
    """A host program's result object. A caller that reads a key the answer lacks gets the
    program family's `malformed` error (host text, never trusted to be complete), not a
    KeyError that would read as a bug in ddprobe."""

    def __init__(self, result: dict[str, Any], *, family: str, where: str,
                 extra: dict[str, Any]) -> None:
        super().__init__(result)
        self._family, self._where, self._extra = family, where, extra

    def __missing__(self, key: str) -> Any:
        raise host_error(self._family, "malformed", f"{self._where} has no {key!r}",
                         self._extra)

    def text(self, key: str) -> str:
        """The field `key`, which must be text (else the family's `malformed` error)."""
        v = self[key]
        if not isinstance(v, str):
            raise host_error(self._family, "malformed",
                             f"{self._where}: {key!r} is {type(v).__name__}, not text",
                             self._extra)
        return v


def call(r: Remote, op: str, request: dict[str, Any], *, program: str = "ops",
         timeout: float | None = None, source: str | None = None) -> HostAnswer:
    """Run one op of a host program; its result (a JSON object), or the exception its error
    kind maps to (`hostside.errors.ERRORS`; the client's own kinds: `no-python`, the
    interpreter is missing; `no-answer`, no answer line; `oversize`; `malformed`, an answer
    whose result is not an object). `source` is the program's text when not the one
    `program_source(program, op)` builds (a test's program of a given size)."""
    prog = PROGRAMS[program]
    src = program_source(program, op) if source is None else source
    res = r.python(["-c", BOOT, op], input=program_input(src, json.dumps(request)),
                   timeout=prog.timeout if timeout is None else timeout)
    host, python = r.host.name, r.host.python
    extra: dict[str, Any] = {"host": host, "python": python, "op": op,
                             "argv": (python, "-c", prog.label, op), "exit_code": res.exit_code,
                             "stdout": res.stdout, "stderr": res.stderr}
    try:
        doc = _answer(res.stdout, prog.max_answer)
    except _Oversize as e:
        raise host_error(prog.family, "oversize",
                         f"{host}: the {program} program's answer to {op!r} is {e.size} bytes,"
                         f" over the {prog.max_answer} it may send; not read", extra) from None
    if doc is None:
        if res.exit_code == 127 or ("No such file" in res.stderr and python in res.stderr):
            raise host_error(prog.family, "no-python",
                             f"{host}: the interpreter {python!r} was not found on the host",
                             extra)
        raise host_error(prog.family, "no-answer",
                         f"{host}: the {program} program gave no answer to {op!r}", extra)
    if doc.get("ok"):
        result = doc.get("result")
        if not isinstance(result, dict):
            raise host_error(prog.family, "malformed",
                             f"{host}: the {program} program's answer to {op!r} has no "
                             f"result object", extra)
        return HostAnswer(result, family=prog.family, where=f"{host}: the {program} program's "
                          f"answer to {op!r}", extra=extra)
    err = doc.get("error")
    err = dict(err) if isinstance(err, dict) else {}
    kind = str(err.pop("kind", prog.default_kind))
    msg = f"{host}: {clean(err.pop('message', prog.default_message))}"
    raise host_error(prog.family, kind, msg, err)


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
    def from_dict(cls, d: Any) -> Install:
        """The sources program's install record (host text: every field checked, cleaned)."""
        if not isinstance(d, dict):
            raise host_error("sources", "malformed", "the host's install record is not an object")
        got: dict[str, Any] = {}
        for k in ("package", "version", "path", "site_packages", "python", "python_version"):
            v = d.get(k, "" if k == "python_version" else None)
            if not isinstance(v, str) and not (k == "version" and v is None):
                raise host_error("sources", "malformed",
                                 f"the host's install record has no text {k!r}")
            got[k] = v if v is None else clean(v)[:4096]
        return cls(**got)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def find_install(r: Remote, host: Any = None) -> Install:
    """Locate `host.package` with the host's interpreter (importlib.util.find_spec; version from
    importlib.metadata or its version.py). `host` defaults to the remote's own host entry."""
    h = host if host is not None else r.host
    return Install.from_dict(call(r, "locate", {"package": h.package}, program="sources",
                                  timeout=60))
