"""The host lock: two ddprobe runs never drive the same server at once.

`{server.workdir}/lock` is created atomically on the host (O_CREAT|O_EXCL) and holds its owner
(user@machine), pid, time, command and a random token. A second run gets LockedError naming the
owner. A stale lock (its owner pid no longer runs on the SAME machine, or older than max_age)
is reported, and broken only when asked (`--break-lock`). The lock is re-entrant within one
run: bisect holds it for a whole run while each cell takes it again (the run's `RunCaches.held`
knows which locks this run holds; a HostLock given no caches re-enters only itself).
"""
from __future__ import annotations

import getpass
import json
import os
import re
import shlex
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

from ddprobe import interrupt
from ddprobe.errors import LockedError, RemoteError
from ddprobe.hostside.client import call as host_call
from ddprobe.inventory import Host
from ddprobe.remote import Remote
from ddprobe.server.caches import RunCaches

DEFAULT_MAX_AGE = 12 * 3600.0  # a lock this old is stale (a bisect refreshes it every cell)

def _call(r: Remote, op: str, req: dict[str, Any]) -> dict[str, Any]:
    return host_call(r, op, req, timeout=30, program="lock")


def this_machine() -> str:
    return socket.gethostname()


def this_boot() -> str:
    """This machine and boot (machine-id + boot id): a pid is only comparable within one boot
    of one machine; hostnames repeat across containers and laptops."""
    parts = []
    for f in ("/etc/machine-id", "/proc/sys/kernel/random/boot_id"):
        try:
            with open(f, encoding="ascii") as fh:
                parts.append(fh.read().strip())
        except OSError:
            return ""
    return ":".join(parts) if all(parts) else ""


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


@dataclass(frozen=True)
class LockInfo:
    owner: str  # user@machine
    machine: str
    pid: int
    time: float  # epoch seconds (the owner's clock), refreshed while held
    command: str
    token: str
    since: float = 0.0  # when it was first taken
    boot: str = ""  # machine-id:boot-id of the owner (empty in locks of older ddprobe)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LockInfo:
        return cls(owner=str(d.get("owner", "?")), machine=str(d.get("machine", "")),
                   pid=int(d.get("pid") or 0), time=float(d.get("time") or 0.0),
                   command=str(d.get("command", "")), token=str(d.get("token", "")),
                   since=float(d.get("since") or d.get("time") or 0.0),
                   boot=str(d.get("boot") or ""))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def stale_reason(self, *, max_age: float = DEFAULT_MAX_AGE, now: float | None = None,
                     machine: str | None = None) -> str | None:
        """Why this lock is stale, or None while its owner may still be running."""
        now = time.time() if now is None else now
        here = this_machine() if machine is None else machine
        if self.machine == here and self.pid > 0 and not _pid_alive(self.pid):
            return f"its owner (pid {self.pid} on {self.machine}) no longer runs"
        age = now - self.time
        if age > max_age:
            return f"it was last refreshed {_ago(age)} ago (max age {_ago(max_age)})"
        return None

    def provably_dead(self) -> bool:
        """Its owner ran on this very machine in this boot and its pid is gone: nobody else
        can hold it, so the next run takes it over without --break-lock (issue 15)."""
        here = this_boot()
        return bool(here) and self.boot == here and self.pid > 0 and not _pid_alive(self.pid)

    def describe(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        cmd = f", running '{self.command}'" if self.command else ""
        return f"{self.owner} (pid {self.pid}, since {_ago(now - self.since)} ago{cmd})"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ago(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def default_command() -> str:
    """This command line as the lock records it (world-readable on a shared host): values of
    `--env K=V` and of secret-looking options (`--api-key X`) are replaced by `***`."""
    args = [os.path.basename(sys.argv[0]) or "python", *redact_argv(sys.argv[1:])]
    return shlex.join(args)[:200]


_SECRET_OPT = re.compile(r"--?([\w-]*[-_])?(key|token|secret|password|passwd)\Z", re.I)


def redact_argv(args: list[str]) -> list[str]:
    """argv with secret values replaced: `--env K=V` -> `--env K=***`, `--env=K=V` likewise,
    `--api-key X` / `--api-key=X` -> `***`. Names stay: they say what was set."""
    out: list[str] = []
    after: str | None = None
    for a in args:
        if after == "env":
            out.append(a.partition("=")[0] + "=***" if "=" in a else a)
        elif after == "secret":
            out.append("***")
        else:
            opt, eq, val = a.partition("=")
            if opt == "--env" and eq:
                out.append(f"--env={val.partition('=')[0]}=***")
            elif eq and _SECRET_OPT.match(opt):
                out.append(f"{opt}=***")
            else:
                out.append(a)
        after = "env" if a == "--env" else "secret" if _SECRET_OPT.match(a) else None
    return out


class HostLock:
    """`with HostLock(r, host): ...` holds `{workdir}/lock` on the host for the block."""

    def __init__(self, r: Remote, host: Host, *, command: str | None = None,
                 break_lock: bool = False, max_age: float = DEFAULT_MAX_AGE,
                 caches: RunCaches | None = None) -> None:
        self.r, self.host = r, host
        self.held_locks = (caches if caches is not None else RunCaches()).held
        self.command = default_command() if command is None else command
        self.break_lock, self.max_age = break_lock, max_age
        self.token: str | None = None
        self.depth = 0
        self.broken: LockInfo | None = None  # the stale lock this one replaced, if any
        self.took_over = False  # ... and its owner was provably dead (no --break-lock needed)
        self.release_error: str | None = None  # why the lock could not be removed, if so

    @property
    def path(self) -> str:
        return self.r.expand(self.host.server.workdir).rstrip("/") + "/lock"

    @property
    def held(self) -> bool:
        return self.depth > 0

    def _info(self) -> dict[str, Any]:
        now = time.time()
        machine = this_machine()
        return {"owner": f"{_user()}@{machine}", "machine": machine, "pid": os.getpid(),
                "time": now, "since": now, "command": self.command, "token": uuid.uuid4().hex,
                "boot": this_boot()}

    def acquire(self) -> HostLock:
        if self.depth:
            self.depth += 1
            return self
        info = self._info()
        res = _call(self.r, "lock", {"path": self.path, "info": info})
        if not res["acquired"]:
            holder = LockInfo.from_dict(res["holder"])
            if self._ours(holder):
                # this run already holds it (e.g. bisect around run_cell): re-enter
                self.held_locks.enter(holder.token)
                self.token, self.depth = holder.token, 1
                self._refresh()
                return self
            why = holder.stale_reason(max_age=self.max_age)
            where = f"{self.host.name}:{self.path}"
            if why is None:
                raise LockedError(f"{self.host.name} is locked by {holder.describe()} "
                                  f"({where}); wait for it to finish")
            dead = holder.provably_dead()
            if not self.break_lock and not dead:
                raise LockedError(f"{self.host.name} has a stale lock: {holder.describe()}; "
                                  f"{why} ({where}). Re-run with --break-lock to take it over")
            res = _call(self.r, "break", {"path": self.path, "info": info,
                                          "stale_token": holder.token})
            if not res["acquired"]:
                other = LockInfo.from_dict(res["holder"])
                raise LockedError(f"{self.host.name} was locked again by {other.describe()} "
                                  f"while the stale lock was being broken ({where})")
            self.broken = holder
            self.took_over = dead  # an orphan of a dead run: its server is stopped by the caller
        self.token, self.depth = info["token"], 1
        self.held_locks.enter(info["token"])
        return self

    def _ours(self, holder: LockInfo) -> bool:
        return holder.machine == this_machine() and holder.pid == os.getpid() \
            and self.held_locks.holds(holder.token)

    def still_held(self) -> bool:
        """After a reconnect: is the lock file still this lock's (nobody broke it)?"""
        if not self.token:
            return False
        res = _call(self.r, "refresh", {"path": self.path, "token": self.token,
                                        "update": {"time": time.time()}})
        return bool(res.get("refreshed"))

    def _refresh(self) -> None:
        if self.token:
            _call(self.r, "refresh", {"path": self.path, "token": self.token,
                                      "update": {"time": time.time()}})

    def release(self) -> None:
        if not self.depth or self.token is None:
            return
        self.depth -= 1
        if self.depth:
            return
        token = self.token
        self.token = None
        if self.held_locks.leave(token):
            return
        try:
            _call(self.r, "unlock", {"path": self.path, "token": token})
            if interrupt.stopping():
                interrupt.cleaned(f"released the lock on {self.host.name}")
        except RemoteError as e:
            # The connection is gone: the file stays. Keep its token so that this run can
            # take its own lock back; any other run will see it as stale once we exit.
            self.release_error = str(e)
            return
        self.held_locks.forget(token)

    def __enter__(self) -> HostLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def read_lock(r: Remote, host: Host) -> LockInfo | None:
    """The lock's holder, or None when the host is not locked (for `ddprobe server status`)."""
    path = r.expand(host.server.workdir).rstrip("/") + "/lock"
    res = r.run(["cat", "--", path], timeout=30)
    if not res.ok:
        return None
    try:
        return LockInfo.from_dict(json.loads(res.stdout))
    except (ValueError, TypeError, RecursionError, AttributeError):
        return None
