"""The session guard (tests/session_guard.py, wired in tests/conftest.py): a test session serves
the built-in testbed on a port of its own when DDPROBE_TESTBED_PORT is unset, so a server that a
killed run left on 31830 cannot break it; and at its end it stops the servers it started and
left running, by process group, naming them, and never another run's.

The expected behaviour is written down in session_guard's docstring. Everything here is real:
testbed servers (`python -m ddtestbed.launch_server`) and, end to end, an inner pytest session
with this conftest, run as a subprocess with the variable unset while this test holds 31830.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import session_guard
import xdist_groups
from testbed_util import TestbedServer, free_port, install_prefix

TESTS = Path(__file__).resolve().parent
DEFAULT_PORT = 31830  # ddprobe/inventory: the built-in testbed's port when the variable is unset


def test_an_unset_port_is_chosen_free_and_a_set_one_is_kept() -> None:
    env: dict[str, str] = {}
    port = session_guard.choose_testbed_port(env)
    assert port is not None and env[session_guard.PORT_VAR] == str(port)
    with socket.socket() as s:  # free: it can be bound
        s.bind(("127.0.0.1", port))
    for given in ({session_guard.PORT_VAR: "31999"}, {session_guard.PORT_VAR: str(DEFAULT_PORT)}):
        kept = dict(given)
        assert session_guard.choose_testbed_port(kept) is None and kept == given
    empty = {session_guard.PORT_VAR: ""}
    assert session_guard.choose_testbed_port(empty) is not None
    assert empty[session_guard.PORT_VAR].isdigit()
    # a port another session chose (an xdist worker inherits its controller's) is replaced
    inherited = dict(empty)
    port = session_guard.choose_testbed_port(inherited)
    assert port is not None and inherited[session_guard.PORT_VAR] == str(port)
    assert inherited[session_guard.CHOSEN_VAR] == str(port)
    # a caller's port beside an outer session's marker is the caller's
    assert session_guard.choose_testbed_port({session_guard.PORT_VAR: "31999",
                                              session_guard.CHOSEN_VAR: "31998"}) is None
    # this very session went through the same code: its variable is set (by the caller or by it)
    assert os.environ[session_guard.PORT_VAR].isdigit()
    assert len(os.environ[session_guard.SESSION_VAR]) == 32


def _spawn(prefix: Path, log: Path, *, cwd: Path, env: dict[str, str],
           new_session: bool = True) -> TestbedServer:
    port = free_port()
    argv = [sys.executable, "-m", "ddtestbed.launch_server", "--model-path", "sim",
            "--port", str(port), "--testbed-scenario", "healthy", "--testbed-time-scale",
            "0.001", "--testbed-startup-scale", "0.0002"]
    full = {k: v for k, v in os.environ.items() if not k.startswith("DDTESTBED_")}
    full.update(PYTHONPATH=str(prefix), PYTHONDONTWRITEBYTECODE="1", DDTESTBED_DEVICE="cpu",
                **env)
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, cwd=cwd, env=full, stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=new_session)
    return TestbedServer(proc, port, log, argv)


def _kill(server: TestbedServer) -> None:
    if server.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait()


@pytest.fixture
def prefix(tmp_path: Path) -> Path:
    return install_prefix(tmp_path / "shared" / "site")


def test_own_servers_by_token_or_base_temp_and_never_another_runs(prefix: Path,
                                                                  tmp_path: Path) -> None:
    """Session A (token `aaaa`, base temp `a-base`) started `by_token` (its environment) and
    `by_path` (working directory under a-base, the way an SSH host's server runs); `other` was
    started by another session (its own token, nothing under a-base): A finds and stops the
    first two, `other` runs on."""
    a_base = tmp_path / "a-base"
    (a_base / "work").mkdir(parents=True)
    shared = prefix.parent
    by_token = _spawn(prefix, shared / "t.log", cwd=shared,
                      env={session_guard.SESSION_VAR: "a" * 32})
    by_path = _spawn(prefix, shared / "p.log", cwd=a_base / "work",
                     env={session_guard.SESSION_VAR: "b" * 32})
    other = _spawn(prefix, shared / "o.log", cwd=shared, env={session_guard.SESSION_VAR: "b" * 32})
    servers = (by_token, by_path, other)
    try:
        for s in servers:
            s.wait_healthy(60)
        found = session_guard.own_servers("a" * 32, [a_base])
        assert [p.pid for p in found] == sorted([by_token.proc.pid, by_path.proc.pid])
        assert {p.port for p in found} == {str(by_token.port), str(by_path.port)}
        assert all(p.pgid == p.pid for p in found)  # each leads its own session, as ddprobe's
        assert session_guard.own_servers("c" * 32, [tmp_path / "elsewhere"]) == []
        session_guard.stop(found, grace=10)
        assert by_token.proc.wait(timeout=10) is not None
        assert by_path.proc.wait(timeout=10) is not None
        assert other.proc.poll() is None  # another run's server is never touched
        text = session_guard.warning_text(found)
        assert f"pid {by_token.proc.pid} (port {by_token.port})" in text
        assert f"pid {by_path.proc.pid} (port {by_path.port})" in text
        assert "ddtestbed.launch_server" in text
    finally:
        for s in servers:
            _kill(s)


INNER = '''
import json
import os
import subprocess
import sys
from pathlib import Path

from testbed_util import free_port, install_prefix

from ddprobe.cli import main


def test_a_bisect_cell_on_the_builtin_testbed(capsys):
    code = main(["bisect", "--host", "testbed", "--budgets", "8", "--json",
                 "--tasks", "reverse_words"])
    out = capsys.readouterr()
    sys.stderr.write(out.err)  # shown in full under "Captured stderr call" if this fails
    doc = json.loads(out.out)
    assert code == 0, doc["verdicts"]
    assert [(v["kind"], v["budgets"]) for v in doc["verdicts"]] == [("ok", [8])]


def test_leaves_two_servers_running(tmp_path):
    prefix = install_prefix(tmp_path / "site")
    argv = [sys.executable, "-m", "ddtestbed.launch_server", "--model-path", "sim",
            "--testbed-scenario", "healthy", "--testbed-time-scale", "0.001"]
    env = dict(os.environ, PYTHONPATH=str(prefix))
    pids = []
    # one in its own session (as ddprobe starts a server), one in this run's process group
    for new_session in (True, False):
        p = subprocess.Popen(argv + ["--port", str(free_port())], cwd=prefix, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=new_session)
        pids.append(str(p.pid))
    Path(os.environ["LEAK_PIDS"]).write_text(" ".join(pids))
'''


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


@contextlib.contextmanager
def holding(port: int) -> Iterator[None]:
    """Port `port` taken, by this test's socket or (when it cannot bind) by whoever has it."""
    s = socket.socket()
    try:
        with contextlib.suppress(OSError):
            s.bind(("127.0.0.1", port))
            s.listen()
        yield
    finally:
        s.close()


def _inner(tmp_path: Path, name: str, *args: str, port: str | None) -> subprocess.CompletedProcess:
    test_file = tmp_path / name / "test_inner.py"
    test_file.parent.mkdir()
    test_file.write_text(INNER)
    # a session of its own, as a user starts one: none of this session's pytest or
    # pytest-xdist settings (PYTEST_ADDOPTS, PYTEST_XDIST_WORKER, the groups file) or port
    env = {k: v for k, v in os.environ.items()
           if k not in (session_guard.PORT_VAR, xdist_groups.GROUPS_VAR)
           and not k.startswith("PYTEST_")}
    if port is not None:
        env[session_guard.PORT_VAR] = port
    env.update(PYTHONPATH=os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]),
               DDPROBE_RUNS=str(tmp_path / name / "runs"), LEAK_PIDS=str(tmp_path / "pids"))
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p",
                           "no:cacheprovider", "-q", "-rA", "--basetemp",
                           str(tmp_path / name / "base"), str(test_file), *args],
                          cwd=test_file.parent, env=env, capture_output=True, text=True,
                          timeout=600, start_new_session=True)


@pytest.mark.slow
def test_a_session_with_the_port_unset_passes_beside_31830_and_stops_what_it_left(
        prefix: Path, tmp_path: Path) -> None:
    """Expected: with 31830 taken and DDPROBE_TESTBED_PORT unset, the inner session's bisect cell
    on the built-in testbed passes (its own port), the two servers its other test left are
    stopped at its end and named in a warning, and a server of this (outer) session, which the
    inner one did not start, still runs. The control: the same bisect cell with the variable
    set to 31830 fails, so it is the port choice that makes the first pass."""
    outer = _spawn(prefix, tmp_path / "outer.log", cwd=prefix.parent, env={})
    try:
        outer.wait_healthy(60)
        with holding(DEFAULT_PORT):
            res = _inner(tmp_path, "unset", port=None)
            out = res.stdout + res.stderr
            assert res.returncode == 0, out[-6000:]
            assert "2 passed" in out
            pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
            assert len(pids) == 2 and not any(_alive(p) for p in pids), out[-3000:]
            assert "servers left running" in out and "stopped them (by process group)" in out
            for pid in pids:
                assert f"pid {pid} (port " in out
            assert outer.proc.poll() is None and f"pid {outer.proc.pid} " not in out
            control = _inner(tmp_path, "default", "-k", "bisect_cell", port=str(DEFAULT_PORT))
        cout = control.stdout + control.stderr
        assert control.returncode == 1 and "1 failed" in cout, cout[-6000:]
        assert f"port {DEFAULT_PORT} (127.0.0.1) is already in use" in cout
    finally:
        _kill(outer)
