"""What keeps one pytest session from being broken by another's servers, or breaking them.

Expected behaviour (written before the code; tests/test_session_guard.py checks each point):

* Port. ddprobe's built-in testbed host serves on $DDPROBE_TESTBED_PORT, 31830 when unset. A run
  killed with SIGKILL cannot stop what it started, and its server keeps 31830: every later run
  that leaves the variable unset would fail its built-in testbed tests with "port in use". So
  when the variable is not set, the session picks a free loopback port and sets it in
  os.environ in `pytest_configure`, before any test or ddprobe reads it (ddprobe reads it when
  it builds the built-in host, never at import); the processes the tests start inherit it. A
  port set by the caller (CI, an engineer's shell) is kept as it is. A port that a session
  chose (it says so in $DDPROBE_TESTBED_PORT_CHOSEN) is not the caller's: a session that inherits
  it (a pytest-xdist worker of that session, a pytest run inside a test) chooses its own, so
  workers running side by side never serve the built-in testbed on one port.
* Leaks. At session end (after every fixture's teardown) the session stops the server
  processes (`ddtestbed.launch_server`, `sglang.launch_server`) that it started and that are
  still running, and prints a warning naming each (pid, port, command). "It started" means:
  the process's environment carries DDPROBE_TEST_SESSION=<this session's token> (set in
  `pytest_configure`; ddprobe's local transport and the test helpers pass the environment
  down), or its command line, working directory or environment names a path under this
  session's pytest base temporary directory (the SSH test hosts run their servers from
  there: sshd does not pass the test's environment on). Another run's server matches neither
  and is never touched.
* Stopping is by process group, as ddprobe stops a server: SIGTERM to the group, SIGKILL to
  what is left after a grace period. A server in the test process's own group (a helper that
  did not start a new session) is signalled by its pid alone, never by the group, which would
  take the test run down with it.
"""
from __future__ import annotations

import os
import signal
import socket
import time
import uuid
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from pathlib import Path

PORT_VAR = "DDPROBE_TESTBED_PORT"
CHOSEN_VAR = "DDPROBE_TESTBED_PORT_CHOSEN"  # the port a test session chose itself
SESSION_VAR = "DDPROBE_TEST_SESSION"
SERVER_MODULES = ("ddtestbed.launch_server", "sglang.launch_server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def choose_testbed_port(environ: MutableMapping[str, str]) -> int | None:
    """Set PORT_VAR to a free port when it is unset, empty or another session's choice (see
    CHOSEN_VAR); the port chosen, or None when the caller's choice stands."""
    given = environ.get(PORT_VAR)
    if given and given != environ.get(CHOSEN_VAR):
        return None
    port = free_port()
    environ[PORT_VAR] = environ[CHOSEN_VAR] = str(port)
    return port


def new_session_token(environ: MutableMapping[str, str]) -> str:
    """A fresh token for this session (replacing one inherited from an outer session: each
    session owns what it started itself)."""
    token = uuid.uuid4().hex
    environ[SESSION_VAR] = token
    return token


@dataclass(frozen=True)
class ServerProc:
    pid: int
    pgid: int
    argv: tuple[str, ...]

    @property
    def port(self) -> str:
        args = list(self.argv)
        return args[args.index("--port") + 1] if "--port" in args[:-1] else "?"

    def describe(self) -> str:
        return f"pid {self.pid} (port {self.port}): {' '.join(self.argv)[:300]}"


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def is_server(argv: Iterable[str]) -> bool:
    args = list(argv)
    return any(a in SERVER_MODULES or a.endswith("/launch_server.py") for a in args[1:])


def _owned(pid: int, token: str, roots: tuple[str, ...]) -> bool:
    env = _read(f"/proc/{pid}/environ").split(b"\0")
    if f"{SESSION_VAR}={token}".encode() in env:
        return True
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = ""
    text = "\0".join([cwd, *(a.decode("utf-8", "replace") for a in env),
                      _read(f"/proc/{pid}/cmdline").decode("utf-8", "replace")]) + "\0"
    return any(f"{r}{end}" in text for r in roots for end in ("/", "\0", ":"))


def own_servers(token: str, roots: Iterable[Path]) -> list[ServerProc]:
    """The server processes still running that this session started (see the module text)."""
    rs = {str(r) for r in roots} | {os.path.realpath(r) for r in roots}
    root_t = tuple(sorted(r.rstrip("/") for r in rs if r.rstrip("/")))
    me = os.getpid()
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        pid = int(d)
        argv = tuple(a.decode("utf-8", "replace")
                     for a in _read(f"/proc/{pid}/cmdline").split(b"\0") if a)
        if not argv or not is_server(argv) or not _owned(pid, token, root_t):
            continue
        try:
            found.append(ServerProc(pid, os.getpgid(pid), argv))
        except ProcessLookupError:
            continue
    return sorted(found, key=lambda p: p.pid)


def _alive(pid: int) -> bool:
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return False
    return stat.rsplit(b")", 1)[-1].split()[0] != b"Z"  # a zombie has already exited


def _signal(proc: ServerProc, sig: int) -> None:
    try:
        if proc.pgid == os.getpgrp():
            os.kill(proc.pid, sig)
        else:
            os.killpg(proc.pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop(procs: Iterable[ServerProc], grace: float = 5.0) -> None:
    """SIGTERM each one's group (or the pid alone in our own group), SIGKILL after `grace`."""
    procs = list(procs)
    for p in procs:
        _signal(p, signal.SIGTERM)
    end = time.monotonic() + grace
    while any(_alive(p.pid) for p in procs) and time.monotonic() < end:
        time.sleep(0.05)
    for p in procs:
        if _alive(p.pid):
            _signal(p, signal.SIGKILL)


def warning_text(procs: list[ServerProc]) -> str:
    lines = [f"WARNING: this test session left {len(procs)} server process(es) running; "
             "stopped them (by process group):"]
    lines += [f"  {p.describe()}" for p in procs]
    return "\n".join(lines)
