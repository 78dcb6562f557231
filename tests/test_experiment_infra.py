"""Infrastructure failures are never blamed on the server: an SSH connection lost in the middle
of a cell makes it `error` (unreachable), and so does a host that cannot be reached at all."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SshServer
from server_util import TASKS, CliHost, procs_with, reap, tb_env, tb_server
from testbed_util import free_port

from ddprobe import remote
from ddprobe.cell.experiment import CellReporter, ProbeOptions, run_cell
from ddprobe.cli import main
from ddprobe.exitcodes import ExitCode
from ddprobe.inventory import Host
from ddprobe.results import Config, Outcome
from ddprobe.server import get_manager

pytestmark = pytest.mark.ssh


def _children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == pid:
                out.append(int(name))
    return out


class DropConnection(CellReporter):
    """Kills the SSH session (its sshd processes) once the health wait has begun."""

    def __init__(self, sshd_pid: int) -> None:
        self.sshd_pid, self.dropped = sshd_pid, False

    def health(self, elapsed: float, timeout: float, stage: str, last_line: str) -> None:
        if not self.dropped:
            for pid in _children(self.sshd_pid):
                os.kill(pid, signal.SIGKILL)
            self.dropped = True


def test_ssh_drop_mid_cell_is_an_error(ssh_opts, sshd2: SshServer, make_host: Callable[..., Host],
                                       tb_prefix: Path, tmp_path: Path) -> None:
    host: Host = make_host("gpu-b", python=sys.executable, package="ddtestbed",
                           env=tb_env(tb_prefix), server=tb_server(free_port(), tmp_path / "w"),
                           server_=sshd2)
    rep = DropConnection(sshd2.pid)
    r = remote.connect(host, ssh_opts)
    try:
        cell = run_cell(r, host, Config(budget=8), probe=ProbeOptions(tasks=TASKS[:2]),
                        reporter=rep)
        assert rep.dropped
        assert cell.outcome is Outcome.ERROR and cell.signature is None
        assert cell.error_kind == "unreachable" and cell.error
        assert any("lock could not be released" in n for n in cell.notes)
        # the detached server outlived the session; a new connection finds and stops it
        state = json.loads(Path(host.server.workdir, "server.json").read_text())
        with remote.connect(host, ssh_opts) as r2:
            info = get_manager(r2, host).stop()
        assert info.was_running and info.clean and procs_with(state["marker"]) == []
    finally:
        r.close()
        reap(Path(host.server.workdir))


def test_unreachable_host_exits_4(sshd: SshServer, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  dead:\n    host: 127.0.0.1\n    port: {free_port()}\n"
                   f"    server:\n      model_path: m\n")
    code = main(["-i", str(inv), "--ssh-config", str(sshd.ssh_config),
                 "--connect-timeout", "3", "run", "-H", "dead", "--budget", "8"])
    assert code == ExitCode.UNREACHABLE
    assert "dead" in capsys.readouterr().err


def test_interrupt_mid_cell_leaves_nothing_behind(sshd: SshServer, tb_prefix: Path,
                                                  tmp_path: Path) -> None:
    """Ctrl-C during the health wait: the half-started server is stopped, the lock released."""
    h = CliHost(sshd, tb_prefix, tmp_path, scenario="hang")
    proc = subprocess.Popen([sys.executable, "-m", "ddprobe", "-i", str(h.inv), "--ssh-config",
                             str(sshd.ssh_config), "run", "-H", "gpu",
                             "--budget", "8", "--health-timeout", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state = h.workdir / "server.json"
    # a bound for a broken run only: on a loaded machine the launch alone can take a minute
    deadline = time.monotonic() + 300
    while not state.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert state.exists(), proc.communicate(timeout=5)
    marker = json.loads(state.read_text())["marker"]
    assert procs_with(marker)
    time.sleep(0.3)  # inside the health wait (the hang scenario never becomes healthy)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert procs_with(marker) == [] and not state.exists()
    assert not (h.workdir / "lock").exists()


def test_disk_full_is_an_error(ssh_opts, make_host: Callable[..., Host], tb_prefix: Path,
                               tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a 1 MiB tmpfs as a full disk")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()[:160]}")
    try:
        host: Host = make_host("gpu-a", python=sys.executable, package="ddtestbed",
                               env=tb_env(tb_prefix), server=tb_server(free_port(), small))
        with remote.connect(host, ssh_opts) as r:
            cell = run_cell(r, host, Config(budget=8), probe=ProbeOptions(tasks=TASKS[:1]))
    finally:
        subprocess.run(["umount", str(small)], check=False)
    assert cell.outcome is Outcome.ERROR and cell.signature is None
    assert cell.error_kind == "disk" and "free" in (cell.error or "")


def test_launch_prefix_wraps_the_command(ssh_opts, make_host: Callable[..., Host],
                                         tb_prefix: Path, tmp_path: Path) -> None:
    """A wrapper (e.g. compute-sanitizer for a sanitize cell) goes before the launch command;
    the cell still classifies the server's own failure."""
    host: Host = make_host("gpu-a", python=sys.executable, package="ddtestbed",
                           env=tb_env(tb_prefix), server=tb_server(free_port(), tmp_path / "w"))
    with remote.connect(host, ssh_opts) as r:
        cell = run_cell(r, host, Config(budget=64), launch_prefix=("env", "WRAPPED_BY=ddprobe"))
    assert cell.launch[:3] == ["env", "WRAPPED_BY=ddprobe", sys.executable]
    assert cell.outcome is Outcome.CRASH and cell.signature is not None
    assert cell.signature.kind == "cublas" and cell.flags_checked is True


def test_unknown_task_id_is_refused_before_the_host_is_touched(
        ssh_opts, make_host: Callable[..., Host], tb_prefix: Path, tmp_path: Path) -> None:
    """Found on the H200 against real SGLang 0.5.11: a bad `--tasks` was refused only after
    the server had been restarted (then `2`, which is now a count). Bad probe options are the
    user's input: a ConfigError naming the suite, and no server, lock or log on the host."""
    from ddprobe.errors import ConfigError
    work = tmp_path / "w"
    host: Host = make_host("gpu-a", python=sys.executable, package="ddtestbed",
                           env=tb_env(tb_prefix), server=tb_server(free_port(), work))
    with remote.connect(host, ssh_opts) as r, pytest.raises(ConfigError) as err:
        run_cell(r, host, Config(budget=8),
                 probe=ProbeOptions(tasks=("reverse_words", "no_such_task")))
    assert "unknown task id(s) no_such_task in" in str(err.value)
    assert not (work / "server.json").exists()
    assert not work.exists() or not any(work.rglob("*.log"))
