"""The `command` manager: ddprobe starts the server itself, detached, in its own session.

On the host, under `server.workdir` (default ~/.ddprobe):
  server.json   the running server: pgid, marker, argv, log, port, config (last.json after stop)
  server.pgid   written by the server's own shell before it execs the launch command
  logs/         one log file per start (per cell)
Stop signals the whole process group (and any process carrying the server's marker variable,
i.e. a child that escaped with its own setsid), TERM then KILL after the grace period, and
verifies the port is free and, where nvidia-smi exists, that none of them still holds a GPU.
"""
from __future__ import annotations

import uuid
from typing import Any

from ddprobe.hostside.client import call as host_call
from ddprobe.hostside.errors import HostOpError
from ddprobe.server.launch import Launch
from ddprobe.server.lock import redact_argv
from ddprobe.server.manager import Manager, Peek, ServerStatus, StartInfo, StopInfo, stamp
from ddprobe.untrusted import first_chars

STATE_ERROR_CAP = 200  # characters of the host's output quoted when its state is unreadable

# The group leader is the server (its shell exec'd it): alive while /proc/PGID exists and is not
# a zombie (an orphan's zombie may never be reaped where PID 1 is not an init). Whether the
# server's port is listening yet (/proc/net/tcp: 1, 0, or -1 unknown), so that the health wait
# does not knock on a closed port through the tunnel for minutes. Then the bytes of the log
# from `off` (at most `cap`, the newest), after a header "alive off size skipped listening".
PEEK = r"""pgid=$1; log=$2; off=$3; cap=$4; port=$5; alive=0; listening=-1
if [ -r "/proc/$pgid/stat" ]; then
  st=$(sed -e 's/^.*) //' "/proc/$pgid/stat" 2>/dev/null | cut -c1)
  case "$st" in Z|X|'') alive=0 ;; *) alive=1 ;; esac
elif [ ! -d /proc/self ] && kill -0 "$pgid" 2>/dev/null; then alive=1
fi
if [ -r /proc/net/tcp ]; then
  hex=$(printf '%04X' "$port")
  if cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v p="$hex" \
      '$4 == "0A" { n = split($2, a, ":"); if (a[n] == p) f = 1 } END { exit f ? 0 : 1 }'
  then listening=1; else listening=0; fi
fi
size=$(wc -c < "$log" 2>/dev/null) || size=0
size=$((size + 0)); skip=0
[ "$size" -lt "$off" ] && off=0
if [ $((size - off)) -gt "$cap" ]; then skip=$((size - off - cap)); off=$((size - cap)); fi
printf '%s %s %s %s %s\n' "$alive" "$off" "$size" "$skip" "$listening"
[ "$size" -gt "$off" ] && tail -c +"$((off + 1))" "$log" | head -c "$((size - off))"
exit 0
"""


class CommandManager(Manager):
    kind = "command"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self._state: dict[str, Any] | None = None

    # paths on the host
    def _p(self, name: str) -> str:
        return f"{self.workdir}/{name}"

    def start(self, launch: Launch) -> StartInfo:
        s = self.host.server
        log = self._p(f"logs/{launch.config.key}-{stamp()}.log")
        req = {"state": self._p("server.json"), "pgidfile": self._p("server.pgid"), "log": log,
               "argv": list(launch.argv), "argv_record": redact_argv(list(launch.argv)),
               "env": launch.env_dict, "marker": uuid.uuid4().hex,
               "port": s.port, "bind": s.bind, "config_key": launch.config.key,
               "config": launch.config.to_dict()}
        st = host_call(self.r, "start", req, timeout=90)
        self._state = st
        return StartInfo(self.kind, st["log"], int(st["pgid"]), float(st["started"]),
                         tuple(st["argv"]))

    def stop(self, grace: float | None = None) -> StopInfo:
        g = self.host.server.stop_timeout if grace is None else grace
        res = host_call(self.r, "stop", {"state": self._p("server.json"),
                                            "last": self._p("last.json"), "grace": g},
                           timeout=g + 60)
        if res.get("state"):
            self._state = res["state"]
        return StopInfo(was_running=bool(res["was_running"]), pids=tuple(res["pids"]),
                        signals=tuple(res["signals"]), left=tuple(res["left"]),
                        port_free=res["port_free"], gpu_pids=tuple(res["gpu_pids"]),
                        gpu_checked=bool(res["gpu_checked"]), elapsed=float(res["elapsed"]))

    def _status_raw(self) -> dict[str, Any]:
        s = self.host.server
        return host_call(self.r, "status", {"state": self._p("server.json"),
                                               "last": self._p("last.json"), "port": s.port,
                                               "bind": s.bind}, timeout=30)

    def status(self) -> ServerStatus:
        res = self._status_raw()
        st = res.get("state") or res.get("last") or {}
        running = bool(res["running"])
        started = st.get("started")
        detail = "" if res.get("state") else ("stopped" + (f"; last log {st['log']}"
                                                           if st.get("log") else ""))
        if res.get("state") and not running:
            detail = "exited (not stopped by ddprobe)"
        return ServerStatus(
            host=self.host.name, manager=self.kind, running=running, pids=tuple(res["pids"]),
            port=self.host.server.port, port_busy=res.get("port_busy"),
            config_key=st.get("config_key", ""), config=st.get("config") or {},
            log_path=st.get("log", ""), started_at=started,
            uptime_s=(res["now"] - started) if running and started else None,
            argv=tuple(st.get("argv") or ()), detail=detail)

    def _current(self) -> dict[str, Any]:
        if self._state is None:
            res = self._status_raw()
            self._state = res.get("state") or res.get("last") or {}
        return self._state

    def log_path(self) -> str:
        return str(self._current().get("log", ""))

    def logs(self, *, tail: int | None = None, since: float | None = None) -> str:
        # A per-start log file begins at the start: `since` selects nothing finer here.
        path = self.log_path()
        if not path:
            return ""
        return str(host_call(self.r, "tail", {"path": path, "lines": tail},
                                timeout=60)["text"])

    def peek(self, offset: int, cap: int = 1 << 20) -> Peek:
        """Alive? + the log since `offset`: one `sh` round-trip (a health wait makes many; a
        Python helper would cost an interpreter start-up each time)."""
        st = self._current()
        log = str(st.get("log", ""))
        if log and not log.startswith("/"):
            log = "./" + log
        res = self.r.run(["sh", "-c", PEEK, "sh", str(st.get("pgid") or 0), log or "/dev/null",
                          str(offset), str(cap), str(self.host.server.port)], timeout=30)
        head, _, data = res.stdout.partition("\n")
        try:
            alive, _off, size, _skipped, listening = (int(w) for w in head.split())
        except ValueError:
            said = first_chars((res.stderr or res.stdout).strip(), STATE_ERROR_CAP)
            raise HostOpError(f"{self.host.name}: cannot read the server's state: "
                              f"{said}") from None
        return Peek(bool(alive), data, size, None if listening < 0 else bool(listening))
