"""The one table from a host program's error kind to the ddprobe exception it raises.

Every host program answers `{"ok": false, "error": {"kind": K, "message": M, ...}}` (see
`hostside.common`). The server programs (`ops`, `lock`) and the source program (`sources`) grew
their own vocabularies, and one kind ("io") means a server-side I/O failure for the first and a
failed patch for the second, so the table is keyed by (family, kind); `*` is a family's
fallback. `no-python` is the client's own kind: nothing answered because the host's interpreter
is missing.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ddprobe.errors import (
    ConfigError,
    DdprobeError,
    LockedError,
    PatchError,
    ServerError,
    UsageError,
)


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


# (message, kind, the error's other fields) -> the exception
Raise = Callable[[str, str, dict[str, Any]], DdprobeError]


def _server(cls: type[HostOpError]) -> Raise:
    return lambda msg, kind, extra: cls(msg, kind=kind, extra=extra)


def _plain(cls: type[DdprobeError]) -> Raise:
    return lambda msg, kind, extra: cls(msg)


# the source program's kinds that say a patch (apply, revert, recover, its ledger) failed
PATCH_KINDS = ("mismatch", "missing", "edited", "drift", "refused", "patch", "backup", "io",
               "unknown", "ledger")

ERRORS: dict[tuple[str, str], Raise] = {
    ("server", "port_in_use"): _server(PortInUseError),
    ("server", "disk"): _server(DiskFullError),
    ("server", "running"): _server(AlreadyRunningError),
    ("server", "no-python"): lambda msg, kind, extra: HostOpError(f"{msg} (key 'python')",
                                                                  kind="config"),
    ("server", "*"): _server(HostOpError),
    ("sources", "locked"): _plain(LockedError),
    ("sources", "not-installed"): lambda msg, kind, extra: ConfigError(msg, key="package"),
    ("sources", "usage"): _plain(UsageError),
    **{("sources", k): _plain(PatchError) for k in PATCH_KINDS},
    ("sources", "no-python"): lambda msg, kind, extra: ConfigError(msg, key="python"),
    ("sources", "*"): _plain(DdprobeError),
}


def host_error(family: str, kind: str, message: str,
               extra: dict[str, Any] | None = None) -> DdprobeError:
    """The exception for a host program's error answer (the table's fallback for its family)."""
    make = ERRORS.get((family, kind)) or ERRORS[(family, "*")]
    return make(message, kind, dict(extra or {}))
