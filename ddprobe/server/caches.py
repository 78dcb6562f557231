"""What one run remembers about its hosts, in one record passed down (never a process global).

    caches = RunCaches()                       # one per CLI invocation (Context) or library run
    with HostLock(r, host, caches=caches):     # re-entrant for every HostLock of this run
        prepare_host(r, host, caches=caches)   # server.prepare: once per run and host entry
        host_flags(r, host, cache=caches.flags)  # the install's flags: read once per run

A caller that passes none gets a fresh one, so two runs in one process share nothing.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddprobe.sources.fetch import FlagsCache


def _flags_cache() -> FlagsCache:
    from ddprobe.sources.fetch import FlagsCache  # the AST analysis: loaded when used
    return FlagsCache()


class HeldLocks:
    """The host locks this run holds: token -> depth (re-entrance across HostLock objects,
    e.g. bisect holds a host's lock for the whole run while each cell takes it again)."""

    def __init__(self) -> None:
        self._depth: dict[str, int] = {}
        self._lock = threading.Lock()

    def holds(self, token: str) -> bool:
        with self._lock:
            return token in self._depth

    def enter(self, token: str) -> None:
        with self._lock:
            self._depth[token] = self._depth.get(token, 0) + 1

    def leave(self, token: str) -> int:
        """One level less; the depth left (the token stays known until `forget`)."""
        with self._lock:
            left = max(0, self._depth.get(token, 0) - 1)
            self._depth[token] = left
            return left

    def forget(self, token: str) -> None:
        """The lock file is gone: drop the token unless it was taken again meanwhile."""
        with self._lock:
            if not self._depth.get(token):
                self._depth.pop(token, None)


PrepareKey = tuple[str, str, str, str]


class Prepared:
    """The hosts whose `server.prepare` step this run has done (host entry + step)."""

    def __init__(self) -> None:
        self._done: set[PrepareKey] = set()
        self._lock = threading.Lock()

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._done

    def add(self, key: PrepareKey) -> None:
        with self._lock:
            self._done.add(key)


@dataclass
class RunCaches:
    """One run's memory of its hosts: the install's flags, the prepare steps done, the locks
    held. Built once per Context (CLI invocation) or library run and passed down."""

    flags: FlagsCache = field(default_factory=_flags_cache)
    prepared: Prepared = field(default_factory=Prepared)
    held: HeldLocks = field(default_factory=HeldLocks)
