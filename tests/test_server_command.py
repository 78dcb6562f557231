"""The `command` manager, the host lock and the prepare step, over the real loopback sshd."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import SshServer
from server_util import inventory_text, procs_with

from ddprobe import remote
from ddprobe.cell.restart import StartRequest, start_server
from ddprobe.errors import LockedError
from ddprobe.exitcodes import ExitCode
from ddprobe.inventory import Host, ServerSettings
from ddprobe.results import Config
from ddprobe.server import (
    AlreadyRunningError,
    HostLock,
    PortInUseError,
    build_launch,
    get_manager,
    prepare_host,
)
from ddprobe.server.caches import RunCaches
from ddprobe.server.lock import LockInfo

pytestmark = pytest.mark.ssh


def _state(h: Host) -> dict:
    return json.loads(Path(h.server.workdir, "server.json").read_text())


def _pgrp(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])


def test_start_status_logs_stop(ssh_opts, tb_host: Host) -> None:
    with remote.connect(tb_host, ssh_opts) as r:
        rep = start_server(r, tb_host, StartRequest(Config(budget=8)))
        assert rep.status == "healthy", rep.to_dict()
        mgr = get_manager(r, tb_host)
        st = mgr.status()
        assert st.running and st.config_key == "b8-graph" and st.port_busy is True
        assert st.pids and st.log_path.startswith(tb_host.server.workdir)
        assert "--speculative-ddtree-budget" in st.argv
        assert "The server is fired up and ready to roll!" in mgr.logs()
        assert len(mgr.logs(tail=2).splitlines()) == 2
        marker = _state(tb_host)["marker"]
        assert procs_with(marker) == list(st.pids)
        info = mgr.stop()
        assert info.was_running and info.signals == ("TERM",) and info.clean
        assert info.port_free is True
        after = mgr.status()
    assert not after.running and after.port_busy is False and "stopped" in after.detail
    assert after.log_path == st.log_path  # the last log stays readable after a stop
    assert procs_with(marker) == []


def test_stop_leaves_no_orphans(ssh_opts, tb_host: Host) -> None:
    """A server with a child in its group, one that escaped with setsid and one that ignores
    TERM: stop finds all three (group + marker), KILLs after the grace, none survive."""
    script = ('sleep 300 & setsid sleep 301 & (trap "" TERM; exec sleep 302) & '
              'exec "$0" "$@"')
    h = replace(tb_host, server=replace(tb_host.server, launch=(
        "sh", "-c", script, "{python}", "-m", "{package}.launch_server", "{args}")))
    with remote.connect(h, ssh_opts) as r:
        mgr = get_manager(r, h)
        mgr.start(build_launch(h, Config(budget=8), template=mgr.template()))
        st = _state(h)
        deadline = time.monotonic() + 10
        while len(procs_with(st["marker"])) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        before = procs_with(st["marker"])
        assert len(before) == 4, before  # the server + three children
        escaped = [p for p in before if _pgrp(p) != st["pgid"]]
        assert len(escaped) == 1  # only the marker finds it
        info = mgr.stop(grace=0.5)
    assert info.was_running and set(info.pids) == set(before)
    assert info.signals == ("TERM", "KILL") and info.left == () and info.clean
    assert procs_with(st["marker"]) == []


def test_port_in_use_refuses_to_start(ssh_opts, tb_host: Host) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", tb_host.server.port))
        s.listen(1)
        with remote.connect(tb_host, ssh_opts) as r:
            mgr = get_manager(r, tb_host)
            with pytest.raises(PortInUseError) as ei:
                mgr.start(build_launch(tb_host, Config(budget=8)))
            assert mgr.port_busy()[0]
    assert f"port {tb_host.server.port}" in str(ei.value) and f"pid {os.getpid()}" in str(ei.value)
    assert not Path(tb_host.server.workdir, "server.json").exists()  # nothing was started


def test_start_refuses_while_a_server_runs(ssh_opts, tb_host: Host) -> None:
    with remote.connect(tb_host, ssh_opts) as r:
        mgr = get_manager(r, tb_host)
        mgr.start(build_launch(tb_host, Config(budget=8)))
        try:
            with pytest.raises(AlreadyRunningError, match="still running"):
                mgr.start(build_launch(tb_host, Config(budget=16)))
        finally:
            assert mgr.stop().was_running


def test_detached_start_without_setsid(ssh_opts, tb_host: Host, tmp_path: Path) -> None:
    """Where setsid(1) is missing the helper detaches from Python, with the same result."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    h = replace(tb_host, env=tb_host.env + (("PATH", str(bindir)),))
    with remote.connect(h, ssh_opts) as r:
        mgr = get_manager(r, h)
        start = mgr.start(build_launch(h, Config(budget=8)))
        st = _state(h)
        assert start.pgid == st["pgid"] and _pgrp(st["pgid"]) == st["pgid"]
        assert os.getsid(st["pgid"]) == st["pgid"]  # its own session
        info = mgr.stop()
    assert info.was_running and info.clean and procs_with(st["marker"]) == []


# ----- the host lock ---------------------------------------------------------------------------

def _write_lock(h: Host, **kw: object) -> Path:
    p = Path(h.server.workdir, "lock")
    p.parent.mkdir(parents=True, exist_ok=True)
    info = {"owner": "alice@elsewhere", "machine": "elsewhere", "pid": 1, "time": time.time(),
            "since": time.time(), "command": "ddprobe bisect -H gpu", "token": "t0"}
    info.update(kw)
    p.write_text(json.dumps(info))
    return p


def test_lock_is_reentrant_and_released(ssh_opts, tb_host: Host) -> None:
    path = Path(tb_host.server.workdir, "lock")
    caches = RunCaches()  # one run's: the locks it holds
    with remote.connect(tb_host, ssh_opts) as r:
        with HostLock(r, tb_host, command="outer", caches=caches) as outer:
            held = LockInfo.from_dict(json.loads(path.read_text()))
            assert held.pid == os.getpid() and held.command == "outer"
            with HostLock(r, tb_host, command="inner", caches=caches) as inner:  # same run
                assert inner.token == outer.token
            assert path.exists()  # the inner release keeps the outer's lock
            # another run in this same process (its own caches) is locked out: the lock's
            # re-entrance is the run's, not the process's
            with pytest.raises(LockedError):
                HostLock(r, tb_host, command="other run", caches=RunCaches()).acquire()
            with pytest.raises(LockedError):
                HostLock(r, tb_host, command="no caches").acquire()
        assert not path.exists()


def test_second_run_gets_locked_error_naming_the_owner(ssh_opts, tb_host: Host, sshd: SshServer,
                                                      tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text(inventory_text(sshd.alias, Path(tb_host.env_dict["PYTHONPATH"]),
                                  tb_host.server.port, Path(tb_host.server.workdir)))
    with remote.connect(tb_host, ssh_opts) as r, HostLock(r, tb_host, command="ddprobe bisect"):
        res = subprocess.run([sys.executable, "-m", "ddprobe", "-i", str(inv), "--ssh-config",
                              str(sshd.ssh_config), "server", "stop", "-H", "gpu"],
                             capture_output=True, text=True, timeout=60)
    assert res.returncode == ExitCode.LOCKED, res.stderr
    assert f"pid {os.getpid()}" in res.stderr and "ddprobe bisect" in res.stderr
    assert "--break-lock" not in res.stderr  # a live owner's lock is not breakable


def test_stale_lock_is_reported_then_broken_only_when_asked(ssh_opts, tb_host: Host) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    path = _write_lock(tb_host, machine=socket.gethostname(), owner="bob@here", pid=dead.pid)
    with remote.connect(tb_host, ssh_opts) as r:
        with pytest.raises(LockedError) as ei:
            HostLock(r, tb_host).acquire()
        assert "stale" in str(ei.value) and f"pid {dead.pid}" in str(ei.value)
        assert "--break-lock" in str(ei.value) and path.exists()
        lk = HostLock(r, tb_host, break_lock=True).acquire()
        try:
            assert lk.broken is not None and lk.broken.owner == "bob@here"
            assert json.loads(path.read_text())["token"] == lk.token
        finally:
            lk.release()
    assert not path.exists()


def test_lock_from_another_machine(ssh_opts, tb_host: Host) -> None:
    _write_lock(tb_host)  # fresh, elsewhere: its pid cannot be checked from here
    with remote.connect(tb_host, ssh_opts) as r:
        with pytest.raises(LockedError, match="alice@elsewhere"):
            HostLock(r, tb_host, break_lock=True).acquire()
        _write_lock(tb_host, time=time.time() - 3 * 86400)  # but a 3-day-old one is stale
        with pytest.raises(LockedError, match="max age"):
            HostLock(r, tb_host).acquire()
        with HostLock(r, tb_host, break_lock=True) as lk:
            assert lk.broken is not None and lk.broken.machine == "elsewhere"


# ----- prepare ---------------------------------------------------------------------------------

def test_prepare_installs_the_testbed_once(ssh_opts, tb_host: Host, tmp_path: Path) -> None:
    site = tmp_path / "empty-site"
    h = replace(tb_host, env=(("PYTHONPATH", str(site)),),
                server=replace(tb_host.server, prepare="testbed"))
    caches = RunCaches()
    with remote.connect(h, ssh_opts) as r:
        note = prepare_host(r, h, caches=caches)
        assert note and "copied" in note
        init = site / "ddtestbed" / "__init__.py"
        assert init.is_file() and (site / "ddtestbed" / "launch_server.py").is_file()
        init.write_text(init.read_text() + "# patched on the host\n")
        assert prepare_host(r, h, caches=caches) is None  # once per run
        assert prepare_host(r, h, force=True, caches=caches) is None  # present: not overwritten
        assert prepare_host(r, h, caches=RunCaches()) is None  # another run: still not
    assert init.read_text().endswith("# patched on the host\n")


def test_unknown_prepare_step_is_a_config_error(ssh_opts, tb_host: Host) -> None:
    from ddprobe.errors import ConfigError
    h = replace(tb_host, server=replace(tb_host.server, prepare="nope"))
    with remote.connect(h, ssh_opts) as r, pytest.raises(ConfigError, match="server.prepare"):
        prepare_host(r, h)


def test_stop_frees_the_gpu(ssh_opts, tmp_path: Path) -> None:
    """Where nvidia-smi exists: a server and its child each holding GPU memory are stopped and
    no longer listed as compute apps (the stop's own check). Runs on a GPU host only."""
    import shutil
    if not shutil.which("nvidia-smi"):
        pytest.skip("no nvidia-smi on this machine: the GPU check of stop needs a GPU host")
    try:
        import torch  # noqa: F401 - only to know the test can hold GPU memory
    except ImportError:
        pytest.skip("no torch to hold GPU memory with")
    prog = ("import subprocess, sys, time, torch\n"
            "x = torch.ones(1 << 26, device='cuda')\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import torch, time; "
            "y = torch.ones(1 << 24, device=\"cuda\"); print(\"child\", flush=True); "
            "time.sleep(600)'])\n"
            "print('ready', flush=True); time.sleep(600)\n")
    h = Host(name="gpu", python=sys.executable, transport="local",
             server=replace(ServerSettings(), port=39999, model_path="m",
                            workdir=str(tmp_path), launch=("{python}", "-c", prog)))
    with remote.connect(h, ssh_opts) as r:
        mgr = get_manager(r, h)
        mgr.start(build_launch(h, Config(8), template=("{python}", "-c", prog)))
        deadline = time.monotonic() + 120
        while not {"ready", "child"} <= set(mgr.logs().split()) and time.monotonic() < deadline:
            time.sleep(0.5)
        info = mgr.stop()
    assert info.was_running and len(info.pids) == 2
    assert info.gpu_checked and info.gpu_pids == () and info.clean
