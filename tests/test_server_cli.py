"""`ddprobe server start|stop|restart|status|logs` through a real SSH host running the testbed."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SshServer
from server_util import CliHost, procs_with

from ddprobe.exitcodes import ExitCode

pytestmark = pytest.mark.ssh


@pytest.fixture
def host(sshd: SshServer, tb_prefix: Path, tmp_path: Path) -> Iterator[CliHost]:
    h = CliHost(sshd, tb_prefix, tmp_path)
    yield h
    h.stop()


def _json(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out)


def test_start_status_logs_restart_stop(host: CliHost, capsys: pytest.CaptureFixture[str]) -> None:
    assert host.ddprobe("server", "status", "-H", "gpu") == ExitCode.FAILED
    assert "not running" in capsys.readouterr().out

    assert host.ddprobe("server", "start", "-H", "gpu", "--budget", "8", "--json") == 0
    doc = _json(capsys)
    assert doc["status"] == "healthy" and doc["elapsed"] > 0 and doc["start"]["pgid"]
    assert "--speculative-ddtree-budget" in doc["launch"]

    assert host.ddprobe("server", "start", "-H", "gpu", "--budget", "16") == ExitCode.SERVER
    assert "still running" in capsys.readouterr().err  # one server at a time

    assert host.ddprobe("server", "status", "-H", "gpu", "--json") == ExitCode.OK
    st = _json(capsys)
    assert st["running"] and st["healthy"] and st["config_key"] == "b8-graph-bs64"
    assert st["pids"] == [doc["start"]["pgid"]] and st["lock"] is None

    assert host.ddprobe("server", "logs", "-H", "gpu", "--tail", "200") == ExitCode.OK
    assert "The server is fired up and ready to roll!" in capsys.readouterr().out

    assert host.ddprobe("server", "restart", "-H", "gpu", "--budget", "16", "--no-graph",
                        "--json") == ExitCode.OK
    re = _json(capsys)
    assert re["status"] == "healthy" and re["stop"]["was_running"]
    assert re["start"]["pgid"] != doc["start"]["pgid"]
    marker = json.loads((host.workdir / "server.json").read_text())["marker"]
    assert procs_with(marker)

    assert host.ddprobe("server", "stop", "-H", "gpu") == ExitCode.OK
    assert "stopped 1 process(es) with TERM" in capsys.readouterr().out
    assert procs_with(marker) == []
    assert host.ddprobe("server", "stop", "-H", "gpu") == ExitCode.OK
    assert "no server running" in capsys.readouterr().out
    # the last server's log stays readable after the stop
    assert host.ddprobe("server", "logs", "-H", "gpu", "-n", "5") == ExitCode.OK
    assert capsys.readouterr().out.strip()


def test_start_that_crashes_reports_the_signature(host: CliHost,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = host.ddprobe("server", "start", "-H", "gpu", "--budget", "64")
    out = capsys.readouterr().out
    assert code == ExitCode.CRASH
    assert "crash" in out and "cublas:" in out and "CUBLAS_STATUS_EXECUTION_FAILED" in out
    assert not (host.workdir / "server.json").exists()  # stopped, nothing half-started


def test_start_refused_by_the_flag_check(host: CliHost, capsys: pytest.CaptureFixture[str]) -> None:
    code = host.ddprobe("server", "start", "-H", "gpu", "--budget", "8", "--backend", "fa9")
    out = capsys.readouterr().out
    assert code == ExitCode.REFUSED
    assert "--attention-backend 'fa9' is not one of its choices" in out
    assert not (host.workdir / "server.json").exists()


def test_no_wait_then_follow_logs(host: CliHost, capsys: pytest.CaptureFixture[str]) -> None:
    assert host.ddprobe("server", "start", "-H", "gpu", "--budget", "64", "--no-wait") == 0
    assert "started" in capsys.readouterr().out
    # --follow prints until the server exits (b64 dies in cuBLAS during capture)
    assert host.ddprobe("server", "logs", "-H", "gpu", "--follow") == ExitCode.OK
    out = capsys.readouterr().out
    assert "Received sigquit" in out and out.count("Received sigquit") == 1
    # the server is gone now: --follow still prints its last lines, once, then returns (it
    # used to start from the log's end read after the log: the crash lines written in between
    # were lost)
    assert host.ddprobe("server", "logs", "-H", "gpu", "--follow") == ExitCode.OK
    again = capsys.readouterr().out
    assert again.count("Received sigquit") == 1 and "CUBLAS_STATUS_EXECUTION_FAILED" in again
    assert host.ddprobe("server", "logs", "-H", "gpu", "--follow", "--tail", "3") == ExitCode.OK
    tail = capsys.readouterr().out
    assert 1 <= len(tail.splitlines()) <= 3 and tail.count("Received sigquit") <= 1
