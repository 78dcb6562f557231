"""The one table from a host program's error kind to the ddprobe exception it raises.

Every host program answers `{"ok": false, "error": {"kind": K, "message": M, ...}}` (see
`hostside.common`). The server programs (`ops`, `lock`) and the source program (`sources`) grew
their own vocabularies, and one kind ("io") means a server-side I/O failure for the first and a
failed patch for the second, so the table is keyed by (family, kind); `*` is a family's
fallback. `bad_request` (an unknown op or a malformed request: ddprobe's own bug) comes from
the one main loop. The client's own kinds: `no-python` (the host's interpreter is missing),
`no-answer` (no answer line: the program died, or the interpreter could not run it),
`oversize` (an answer over the program's cap) and `malformed` (an answer without a result
object); for them `extra` holds host, python, op, argv, exit_code, stdout and stderr.

Families: `server` (ops, lock), `sources`, `preflight` (whose client turns every error into
"preflight not run"), `facts` (an unusable answer is an unreachable-class RemoteError naming
the interpreter, as before it was behind the client) and `kernel_log` (whose client reads
every error as "no kernel log").
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ddprobe.errors import (
    ConfigError,
    DdprobeError,
    LockedError,
    PatchError,
    RemoteCommandError,
    RemoteError,
    ServerError,
    UsageError,
)
from ddprobe.untrusted import clean


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


class NoAnswerError(RemoteCommandError):
    """A host program gave no usable answer (none, oversize, or malformed): `code`, `stdout`
    and `stderr` are the process's."""

    def __init__(self, message: str, kind: str, extra: dict[str, Any]) -> None:
        argv = tuple(str(a) for a in extra.get("argv") or ())
        super().__init__(str(extra.get("host", "")), argv, int(extra.get("exit_code") or 0),
                         str(extra.get("stdout", "")), str(extra.get("stderr", "")))
        self.kind, self.reason = kind, message
        if kind != "no-answer":
            self.args = (message,)


# (message, kind, the error's other fields) -> the exception
Raise = Callable[[str, str, dict[str, Any]], DdprobeError]


def _server(cls: type[HostOpError]) -> Raise:
    return lambda msg, kind, extra: cls(msg, kind=kind, extra=extra)


def _plain(cls: type[DdprobeError]) -> Raise:
    return lambda msg, kind, extra: cls(msg)


def _no_answer(msg: str, kind: str, extra: dict[str, Any]) -> DdprobeError:
    return NoAnswerError(msg, kind, extra)


def _facts_unusable(msg: str, kind: str, extra: dict[str, Any]) -> DdprobeError:
    """The facts program's unusable answer, worded as before it was behind the client."""
    if kind not in ("no-answer", "no-python"):
        return RemoteError(msg)
    if extra.get("exit_code") == 0:  # it ran, and printed something else
        tail = clean(str(extra.get("stdout", ""))[-200:])
        return RemoteError(f"{extra.get('host')}: facts program printed no usable JSON: {tail!r}")
    last = (str(extra.get("stderr", "")).strip().splitlines() or ["no output"])[-1]
    return RemoteError(f"{extra.get('host')}: cannot run the host's interpreter "
                       f"{extra.get('python')!r} (exit {extra.get('exit_code')}): {clean(last)}")


# the client's kinds for a program that gave no usable answer
UNUSABLE = ("no-answer", "oversize", "malformed")


# the source program's kinds that say a patch (apply, revert, recover, its ledger) failed
PATCH_KINDS = ("mismatch", "missing", "edited", "drift", "refused", "patch", "backup", "io",
               "unknown", "ledger")

ERRORS: dict[tuple[str, str], Raise] = {
    ("server", "port_in_use"): _server(PortInUseError),
    ("server", "disk"): _server(DiskFullError),
    ("server", "running"): _server(AlreadyRunningError),
    ("server", "no-python"): lambda msg, kind, extra: HostOpError(f"{msg} (key 'python')",
                                                                  kind="config"),
    **{("server", k): _no_answer for k in UNUSABLE},
    ("server", "*"): _server(HostOpError),
    ("sources", "locked"): _plain(LockedError),
    ("sources", "not-installed"): lambda msg, kind, extra: ConfigError(msg, key="package"),
    ("sources", "usage"): _plain(UsageError),  # the user's input (--path, a package name)
    ("sources", "bad_request"): _plain(UsageError),  # an unknown op was `usage` before
    **{("sources", k): _plain(PatchError) for k in PATCH_KINDS},
    ("sources", "no-python"): lambda msg, kind, extra: ConfigError(msg, key="python"),
    **{("sources", k): _no_answer for k in UNUSABLE},
    ("sources", "*"): _plain(DdprobeError),
    ("preflight", "no-python"): _no_answer,
    ("preflight", "*"): _no_answer,
    ("facts", "*"): _facts_unusable,
    ("kernel_log", "*"): _server(HostOpError),
}


def host_error(family: str, kind: str, message: str,
               extra: dict[str, Any] | None = None) -> DdprobeError:
    """The exception for a host program's error answer (the table's fallback for its family)."""
    make = ERRORS.get((family, kind)) or ERRORS[(family, "*")]
    return make(message, kind, dict(extra or {}))
