"""Ctrl-C at any moment leaves nothing behind and says so (issue 15.2), over a real sshd.

ddprobe runs as a user runs it (its own process); SIGINT is what Ctrl-C sends. Expected
(written first), at every point: exit 130; stderr says what was put back and, for a run that
started, the `--resume` command; afterwards no testbed server runs on the port, no lock
file is left, no patch is applied; the resumed run gives the seed's verdicts.
Points: just as the server is launched (its state file appears), in the health wait, a few
moments into later cells (probes, restarts), during a temporary patch apply, and with two
hosts running cells at once (it must not wait for the cells to finish).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bisect_util import REPO, TASKS, Site, assert_clean, bisect_json, write_inventory
from server_util import procs_with

pytestmark = pytest.mark.ssh


def start(inv: Path, cfg: Path, runs: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    e = dict(os.environ, DDPROBE_RUNS=str(runs), PYTHONPATH=str(REPO), NO_COLOR="1", **env)
    return subprocess.Popen([sys.executable, "-m", "ddprobe", "-i", str(inv), "--ssh-config",
                             str(cfg), *args], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


# How long a test waits for its point (a file, a log line) and for ddprobe to exit after
# Ctrl-C: a bound for a broken run only, far above the seconds these take on a loaded machine
WAIT = 300.0
# The seed's start-up is 330 s of weight load (and its capture) at scale 1: at these scales a
# server is still loading when a point is reached and interrupted, whatever the load
SLOW_START = {"DDTESTBED_STARTUP_SCALE": "0.2"}  # ~70 s
NEVER_HEALTHY = {"DDTESTBED_STARTUP_SCALE": "3"}  # ~1000 s


def until(cond, proc: subprocess.Popen[str], timeout: float = WAIT) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the point was never reached"
        time.sleep(0.01)


def server_logs(site: Site) -> str:
    """The text of the server logs on the site's host so far."""
    logs = site.workdir / "logs"
    return "".join(p.read_text(errors="replace") for p in sorted(logs.glob("*.log"))
                   ) if logs.is_dir() else ""


def n_cells(runs: Path) -> int:
    js = list(runs.glob("*/journal.jsonl")) if runs.is_dir() else []
    return sum(ln.count('"type": "cell"') for j in js for ln in j.read_text().splitlines())


def interrupt(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    return err


def nothing_left(inv: Path, *sites: Site) -> None:
    for site in sites:
        assert procs_with(f"--port\x00{site.port}\x00") == [], "a server was left running"
        assert not (site.workdir / "lock").exists(), "the lock was left"
        assert_clean(inv, site)


@pytest.mark.parametrize("point", ["launch", "health"])
def test_interrupt_at_launch_and_in_the_health_wait(sshd, tmp_path: Path, runs: Path,
                                                     capsys, point: str) -> None:
    site = Site(sshd, tmp_path)
    # the server starts slowly (its host's environment), so the health wait lasts; the resume
    # below runs on the same host at the usual fast start-up
    inv = write_inventory(tmp_path, entries=[site.entry_with(SLOW_START)])
    state = site.workdir / "server.json"
    proc = start(inv, sshd.ssh_config, runs, "bisect", "--host", "gpu", "--budgets", "8,16",
                 "--tasks", TASKS, "--no-cheap-cells")
    until(state.exists, proc)
    if point == "health":  # the server runs and loads its weights: ddprobe waits for health
        until(lambda: "Load weight begin" in server_logs(site), proc)
        assert "The server is fired up" not in server_logs(site)
    err = interrupt(proc)
    assert "interrupted: " in err and "stopped the server of b16-graph on gpu" in err, err
    run_id = next(runs.iterdir()).name
    assert f"Resume with `ddprobe bisect --resume {run_id}`" in err
    nothing_left(inv, site)
    inv = write_inventory(tmp_path, site)
    code, doc = bisect_json(capsys, inv, sshd.ssh_config, "--resume", run_id)
    assert code == 1
    assert {tuple(v["budgets"]): v["kind"] for v in doc["verdicts"]} == {
        (8,): "ok", (16,): "buffer_sizing"}
    nothing_left(inv, site)


@pytest.mark.parametrize("delay", [0.4, 1.5, 3.0])
def test_interrupt_later_in_a_bisect(sshd, tmp_path: Path, runs: Path, delay: float) -> None:
    site = Site(sshd, tmp_path)
    inv = write_inventory(tmp_path, site)
    proc = start(inv, sshd.ssh_config, runs, "bisect", "--host", "gpu", "--budgets",
                 "8,16,32", "--tasks", TASKS)
    until(lambda: n_cells(runs) >= 1, proc)
    time.sleep(delay)  # a restart, a health wait, probes or an oversize patch of a later cell
    if proc.poll() is not None:
        pytest.fail("the bisect finished before the interrupt")
    err = interrupt(proc)
    assert "interrupted: " in err and "--resume" in err, err
    nothing_left(inv, site)


def test_interrupt_during_a_temporary_patch(sshd, tmp_path: Path, runs: Path) -> None:
    site = Site(sshd, tmp_path)
    inv = write_inventory(tmp_path, site)
    ledger_dir = site.prefix / ".ddprobe"
    # the host helper pauses between the files it patches: Ctrl-C lands inside the apply
    proc = start(inv, sshd.ssh_config, runs, "bisect", "--host", "gpu", "--budgets", "8,16",
                 "--tasks", TASKS, DDPROBE_TEST_APPLY_PAUSE="2")
    until(lambda: any(ledger_dir.glob("*")) if ledger_dir.is_dir() else False, proc, 180)
    time.sleep(0.3)
    err = interrupt(proc)
    assert "reverted the temporary patch ddprobe-oversize-" in err, err
    nothing_left(inv, site)


def test_interrupt_with_two_hosts_does_not_wait_for_their_cells(sshd, sshd2, tmp_path: Path,
                                                                runs: Path) -> None:
    a, b = Site(sshd, tmp_path, name="gpu-a"), Site(sshd2, tmp_path, name="gpu-b")
    # cells that would run for a quarter of an hour if waited for: ~1000 s of start-up
    # (the hosts' environment) and a health timeout above it
    inv = write_inventory(tmp_path, entries=[s.entry_with(NEVER_HEALTHY, health_timeout=1800)
                                             for s in (a, b)])
    cfg = tmp_path / "ssh_config_ab"
    cfg.write_text(sshd.ssh_config.read_text().split("Host *")[0] + sshd2.ssh_config.read_text())
    proc = start(inv, cfg, runs, "sweep", "--host", "gpu-a,gpu-b", "--budgets", "8,16",
                 "--graph", "on", "--tasks", TASKS)
    # both cells are in their health wait: each server runs and loads its weights
    until(lambda: all("Load weight begin" in server_logs(s) for s in (a, b)), proc)
    t0 = time.monotonic()
    err = interrupt(proc)
    took = time.monotonic() - t0
    assert took < WAIT, f"Ctrl-C waited {took:.0f}s for the running cells"
    assert not any("The server is fired up" in server_logs(s) for s in (a, b))
    assert n_cells(runs) == 0, "a cell was recorded as finished"
    assert "stopped the server of" in err and "on gpu-a" in err and "on gpu-b" in err, err
    assert "sweep --resume" in err
    nothing_left(inv, a, b)
