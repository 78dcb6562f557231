"""The server-manager interface and its records: start(launch), stop(), status(), logs(), peek().

One manager per way of running a server on a host (`server.manager` in hosts.yaml): a plain
command (`command.py`), a systemd unit (`systemd.py`) or a docker container (`docker.py`).
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from ddprobe.hostside.client import call as host_call
from ddprobe.inventory import Host
from ddprobe.remote import Remote
from ddprobe.server.launch import DEFAULT_TEMPLATE, Launch


@dataclass(frozen=True)
class StartInfo:
    manager: str
    log_path: str  # where the log lives on the host (a file, "journal:UNIT", "docker:NAME")
    pgid: int | None = None
    started_at: float = 0.0  # the host's clock (epoch seconds)
    argv: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class StopInfo:
    was_running: bool
    pids: tuple[int, ...] = ()  # processes found when the stop began
    signals: tuple[str, ...] = ()  # TERM, KILL: what it took
    left: tuple[int, ...] = ()  # survivors: must be empty (no orphans)
    port_free: bool | None = None  # None: no port to check
    gpu_pids: tuple[int, ...] = ()  # processes of the server still holding a GPU
    gpu_checked: bool = False  # nvidia-smi exists on the host and was asked
    elapsed: float = 0.0

    @property
    def clean(self) -> bool:
        return not self.left and self.port_free is not False and not self.gpu_pids

    def problem(self) -> str:
        """Why the stop is not clean, in one line ("" when it is)."""
        parts = []
        if self.left:
            parts.append(f"processes {', '.join(map(str, self.left))} survived TERM and KILL")
        if self.port_free is False:
            parts.append("the port is still in use")
        if self.gpu_pids:
            parts.append(f"processes {', '.join(map(str, self.gpu_pids))} still hold a GPU")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["clean"] = self.clean
        return d


@dataclass(frozen=True)
class ServerStatus:
    host: str
    manager: str
    running: bool
    pids: tuple[int, ...] = ()
    port: int = 0
    port_busy: bool | None = None  # something listens on the server's port
    config_key: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    log_path: str = ""
    started_at: float | None = None
    uptime_s: float | None = None
    argv: tuple[str, ...] = ()
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Peek:
    """A look at the server during a wait: alive?, and the log written since the last look."""

    alive: bool
    data: str
    offset: int
    listening: bool | None = None  # the server's port accepts connections (None: unknown)


class Manager(ABC):
    kind: ClassVar[str] = ""

    def __init__(self, r: Remote, host: Host) -> None:
        self.r, self.host = r, host

    @property
    def workdir(self) -> str:
        return self.r.expand(self.host.server.workdir).rstrip("/") or "/"

    def template(self) -> Sequence[str]:
        return DEFAULT_TEMPLATE

    @abstractmethod
    def start(self, launch: Launch) -> StartInfo:
        """Start the server detached; returns at once (the health wait is separate)."""

    @abstractmethod
    def stop(self, grace: float | None = None) -> StopInfo:
        """Stop the server this manager runs (TERM, grace, KILL) and verify it is gone."""

    @abstractmethod
    def status(self) -> ServerStatus: ...

    @abstractmethod
    def logs(self, *, tail: int | None = None, since: float | None = None) -> str:
        """The current (or last) server log; `since` is an epoch time on the host's clock."""

    @abstractmethod
    def peek(self, offset: int) -> Peek: ...

    def port_busy(self) -> tuple[bool, list[tuple[int, str]]]:
        s = self.host.server
        res = host_call(self.r, "port", {"bind": s.bind, "port": s.port}, timeout=30)
        return bool(res["busy"]), [(int(p), str(c)) for p, c in res.get("listeners") or []]


def stamp() -> str:
    """A sortable, collision-resistant name part for per-cell log files."""
    t = time.time()
    return time.strftime("%Y%m%dT%H%M%S", time.localtime(t)) + f"-{int(t * 1000) % 1000:03d}"
