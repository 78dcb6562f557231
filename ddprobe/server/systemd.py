"""The `systemd` manager: the host's unit runs the server; ddprobe passes the config through a
drop-in it writes and removes.

    /etc/systemd/system/<unit>.d/ddprobe.conf        (a system unit; `sudo -n` when not root)
    ~/.config/systemd/user/<unit>.d/ddprobe.conf     (`unit: user:NAME` = a user unit)

The drop-in overrides ExecStart= with the launch command and adds Environment= lines, and sets
Restart=no so that a crash stays a crash instead of being restarted behind ddprobe's back.
Start = write drop-in, daemon-reload, restart; logs = journalctl -u UNIT --since @START; stop =
systemctl stop, remove the drop-in, daemon-reload.
"""
from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from ddprobe.errors import ConfigError, RemoteCommandError
from ddprobe.remote import CmdResult
from ddprobe.server.launch import Launch, where
from ddprobe.server.manager import Manager, Peek, ServerStatus, StartInfo, StopInfo

DROPIN_NAME = "ddprobe.conf"
_SAFE = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")
_UNIT = re.compile(r"^[A-Za-z0-9:_.@\\-]+$")


def systemd_quote(word: str) -> str:
    """One word of an ExecStart= line: C-style quoting; `%` and `$` escaped so systemd
    neither expands specifiers nor environment variables in it."""
    word = word.replace("%", "%%").replace("$", "$$")
    if _SAFE.match(word):
        return word
    esc = (word.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
           .replace("\t", "\\t"))
    return f'"{esc}"'


def env_line(key: str, value: str) -> str:
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
        raise ConfigError(f"environment variable name {key!r} is not valid for systemd",
                          key="server.env")
    v = value.replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'Environment="{key}={v}"'


def dropin_text(launch: Launch, *, unit: str) -> str:
    argv = list(launch.argv)
    if not argv[0].startswith("/"):
        # older systemd requires an absolute path in ExecStart=; let env(1) find the program
        argv = ["/usr/bin/env", *argv]
    lines = [f"# Written by ddprobe for cell {launch.config.key} of {unit};",
             "# removed by `ddprobe server stop`. Do not edit: the next cell replaces it.",
             "[Service]", "Restart=no"]
    lines += [env_line(k, v) for k, v in launch.env]
    lines += ["ExecStart=", "ExecStart=" + " ".join(systemd_quote(w) for w in argv)]
    return "\n".join(lines) + "\n"


def parse_unit(spec: str) -> tuple[str, bool]:
    """`NAME` (a system unit) or `user:NAME` (a user unit); `.service` added when missing."""
    user = spec.startswith("user:")
    name = spec[5:] if user else spec
    if not name or not _UNIT.match(name):
        raise ConfigError(f"server.unit {spec!r} is not a systemd unit name",
                          key="server.unit")
    if "." not in name:
        name += ".service"
    return name, user


class SystemdManager(Manager):
    kind = "systemd"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        if not self.host.server.unit:
            raise ConfigError(f"host '{self.host.name}' uses the systemd manager but has no "
                              f"server.unit", key="server.unit", **where(self.host))
        self.unit, self.user = parse_unit(self.host.server.unit)
        self._sudo: list[str] | None = None
        self._since: float | None = None

    # -- commands --------------------------------------------------------------------------
    def sudo(self) -> list[str]:
        if self._sudo is None:
            if self.user:
                self._sudo = []
            else:
                uid = self.r.run(["id", "-u"], timeout=30).stdout.strip()
                self._sudo = [] if uid == "0" else ["sudo", "-n"]
        return self._sudo

    def systemctl(self, *args: str) -> list[str]:
        return [*self.sudo(), "systemctl", *(["--user"] if self.user else []), *args]

    def journalctl(self, *args: str) -> list[str]:
        unit = ["--user-unit", self.unit] if self.user else ["-u", self.unit]
        return [*self.sudo(), "journalctl", *unit, "-o", "cat", "--no-pager", *args]

    def dropin_path(self) -> str:
        base = "~/.config/systemd/user" if self.user else "/etc/systemd/system"
        return self.r.expand(f"{base}/{self.unit}.d/{DROPIN_NAME}")

    def _run(self, argv: Sequence[str], timeout: float = 120.0) -> CmdResult:
        return self.r.run(list(argv), timeout=timeout, check=True)

    def _host_time(self) -> float:
        return float(self.r.run(["date", "+%s.%N"], timeout=30, check=True).stdout.strip()
                     .replace("N", "0"))

    # -- interface -------------------------------------------------------------------------
    def start(self, launch: Launch) -> StartInfo:
        path = self.dropin_path()
        text = dropin_text(launch, unit=self.unit)
        d = path.rsplit("/", 1)[0]
        self._run([*self.sudo(), "mkdir", "-p", "--", d])
        # created 0600 before anything is written: the drop-in holds the environment values
        self._run([*self.sudo(), "install", "-m", "600", "/dev/null", path])
        self.r.run([*self.sudo(), "tee", "--", path], input=text, timeout=60, check=True)
        self._since = self._host_time()
        self._run(self.systemctl("daemon-reload"))
        self._run(self.systemctl("restart", "--no-block", self.unit))
        return StartInfo(self.kind, f"journal:{self.unit}", None, self._since,
                         tuple(launch.argv))

    def _state(self) -> dict[str, str]:
        res = self.r.run(self.systemctl("show", "-p", "ActiveState", "-p", "SubState", "-p",
                                        "MainPID", "-p", "ExecMainStartTimestampMonotonic",
                                        self.unit), timeout=30)
        out: dict[str, str] = {}
        for line in res.stdout.splitlines():
            k, _, v = line.partition("=")
            out[k] = v
        return out

    def stop(self, grace: float | None = None) -> StopInfo:
        st = self._state()
        was = st.get("ActiveState") in ("active", "activating", "reloading", "deactivating")
        pid = int(st.get("MainPID") or 0)
        t0 = time.perf_counter()
        res = self.r.run(self.systemctl("stop", self.unit),
                         timeout=(grace or self.host.server.stop_timeout) + 60)
        if not res.ok:
            raise RemoteCommandError(self.host.name, res.argv, res.exit_code, res.stdout,
                                     res.stderr)
        self.r.run([*self.sudo(), "rm", "-f", "--", self.dropin_path()], timeout=30, check=True)
        self._run(self.systemctl("daemon-reload"))
        busy, _ = self.port_busy()
        return StopInfo(was_running=was, pids=(pid,) if pid else (), signals=("systemctl stop",),
                        port_free=not busy, elapsed=time.perf_counter() - t0)

    def status(self) -> ServerStatus:
        st = self._state()
        running = st.get("ActiveState") in ("active", "activating", "reloading")
        pid = int(st.get("MainPID") or 0)
        key = ""
        res = self.r.run(["cat", "--", self.dropin_path()], timeout=30)
        m = re.search(r"for cell (\S+) of", res.stdout) if res.ok else None
        if m:
            key = m.group(1)
        return ServerStatus(host=self.host.name, manager=self.kind, running=running,
                            pids=(pid,) if pid else (), port=self.host.server.port,
                            config_key=key, log_path=f"journal:{self.unit}",
                            detail=f"{st.get('ActiveState', '?')}/{st.get('SubState', '?')}")

    def logs(self, *, tail: int | None = None, since: float | None = None) -> str:
        since = self._since if since is None else since
        args = [] if since is None else ["--since", f"@{since:.3f}"]
        if tail is not None:
            args += ["-n", str(tail)]
        return self.r.run(self.journalctl(*args), timeout=120, check=True).stdout

    def peek(self, offset: int) -> Peek:
        text = self.logs()
        st = self._state()
        alive = st.get("ActiveState") in ("active", "activating", "reloading")
        if len(text) < offset:
            offset = 0
        return Peek(alive, text[offset:], len(text))
