"""A dropped SSH connection never becomes a result (issue 15.3), over real sshd servers.

The connection is dropped the way a network or a restarted sshd drops it: the sshd child
that carries ddprobe's connection is SIGKILLed while a bisect or sweep runs (ddprobe runs in
its own process, as a user runs it). Expected (written first):
- a drop mid-run: ddprobe reconnects, runs the interrupted cell again and ends with the
  right verdicts (b8 ok, b16 buffer_sizing); no `error` cell in the journal; it says so.
- the host stays gone (sshd itself killed): the run stops unfinished (exit 4) naming the run
  to resume; nothing seen through the dead connection is journaled as a result; when the
  host is back (here: the same machine through another sshd), `--resume` finishes it with
  the right verdicts, taking over the lock the dead process left (same machine, same boot,
  pid gone) and stopping the server it left running.
- a sweep whose cells end in an infrastructure error (the server port taken) exits 5, not
  0, and `sweep --resume` runs exactly those cells again.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bisect_util import REPO, TASKS, Site, assert_clean, bisect_json, write_inventory
from server_util import procs_with

from ddprobe.cli import main
from ddprobe.store import load_run

pytestmark = pytest.mark.ssh


def children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def kill_sessions(sshd_pid: int, *, main: bool = False) -> int:
    """SIGKILL every sshd child of this server and their children (the per-connection monitor
    and its session process): each connection drops as if the network went away."""
    kids, todo = [], children(sshd_pid)
    while todo:
        k = todo.pop()
        kids.append(k)
        todo += children(k)
    if main:
        os.kill(sshd_pid, signal.SIGKILL)
    for k in kids:
        try:
            os.kill(k, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(kids)


def cells(run_dir: Path) -> list[dict]:
    j = run_dir / "journal.jsonl"
    if not j.exists():
        return []
    return [json.loads(ln) for ln in j.read_text().splitlines()
            if ln.strip() and '"type": "cell"' in ln]


def start(inv: Path, cfg: Path, runs: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    e = dict(os.environ, DDPROBE_RUNS=str(runs), PYTHONPATH=str(REPO), NO_COLOR="1", **env)
    return subprocess.Popen([sys.executable, "-m", "ddprobe", "-i", str(inv), "--ssh-config",
                             str(cfg), *args], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_cells(runs: Path, proc: subprocess.Popen[str], n: int) -> Path:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        dirs = sorted(runs.glob("*-*-*")) if runs.is_dir() else []
        if dirs and len(cells(dirs[0])) >= n:
            return dirs[0]
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.05)
    raise AssertionError("no progress before the deadline")


def wait_next_cell_server(runs: Path, proc: subprocess.Popen[str], site: Site) -> Path:
    """Wait for the first cell in the journal and then for the next cell's server launch (a
    process on the site's port not seen while the first cell ran): a drop made then lands
    inside the next cell (its restart or health wait), whatever the machine's load."""
    needle = f"--port\x00{site.port}\x00"
    seen: set[int] = set()
    run_dir: Path | None = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        now = set(procs_with(needle))  # taken before the journal is read (see below)
        if run_dir is None:
            dirs = sorted(runs.glob("*-*-*")) if runs.is_dir() else []
            if dirs and cells(dirs[0]):
                run_dir = dirs[0]  # `now` predates the journal line: cell 1's processes only
            seen |= now
        elif now - seen:
            return run_dir
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.02)
    raise AssertionError("the next cell's server never started")


def clean(inv: Path, site: Site, cfg: Path) -> None:
    assert_clean(inv, site, cfg)  # reached through cfg (the site's own sshd may be gone)


def test_a_drop_mid_bisect_is_retried_not_recorded(sshd_factory, tmp_path: Path,
                                                  runs: Path) -> None:
    srv = sshd_factory("drop")
    site = Site(srv, tmp_path)
    inv = write_inventory(tmp_path, site)
    proc = start(inv, srv.ssh_config, runs, "bisect", "--host", "gpu", "--budgets", "8,16",
                 "--tasks", TASKS, "--json", DDPROBE_RECONNECT_TIMEOUT="60")
    run_dir = wait_next_cell_server(runs, proc, site)  # into the next cell
    assert kill_sessions(srv.pid) >= 1
    out, err = proc.communicate(timeout=300)

    assert proc.returncode == 1, err[-3000:]
    doc = json.loads(out)
    kinds = {tuple(v["budgets"]): v["kind"] for v in doc["verdicts"]}
    assert kinds == {(8,): "ok", (16,): "buffer_sizing"}, kinds
    assert "reconnected after" in err
    outcomes = [c["outcome"] for c in cells(run_dir)]
    assert "error" not in outcomes, outcomes
    assert load_run(run_dir).finished
    clean(inv, site, srv.ssh_config)


def test_a_host_that_stays_gone_stops_the_run_unfinished_then_resume(
        sshd, sshd_factory, tmp_path: Path, runs: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    srv = sshd_factory("gone")
    site = Site(srv, tmp_path)
    inv = write_inventory(tmp_path, site)
    cfg = tmp_path / "ssh_config"
    cfg.write_text(srv.ssh_config.read_text())
    proc = start(inv, cfg, runs, "bisect", "--host", "gpu", "--budgets", "8,16,32",
                 "--tasks", TASKS, DDPROBE_RECONNECT_TIMEOUT="3")
    run_dir = wait_next_cell_server(runs, proc, site)  # into the next cell
    kill_sessions(srv.pid, main=True)  # the host is gone: no new connection is accepted
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 4, err[-3000:]
    assert "did not come back within 3s" in err and "stops unfinished" in err
    assert f"--resume {run_dir.name}" in err
    rec = load_run(run_dir)
    assert not rec.finished
    assert all(c.outcome.value != "error" for c in rec.cells), [c.outcome for c in rec.cells]
    done = len(rec.cells)
    # the host is back (the same machine, reached through another sshd): resume finishes it
    cfg.write_text(sshd.ssh_config.read_text().replace("Host gpu-a\n", f"Host {srv.alias}\n"))
    code, doc = bisect_json(capsys, inv, cfg, "--resume", run_dir.name)
    kinds = {tuple(v["budgets"]): v["kind"] for v in doc["verdicts"]}
    assert kinds == {(8,): "ok", (16,): "buffer_sizing", (32,): "graph_capture"}, kinds
    assert code == 1 and doc["restarts_used"] == doc["restarts_this_invocation"] + done
    clean(inv, site, cfg)


def test_the_next_run_cleans_up_what_a_dead_run_left(sshd, tmp_path: Path, runs: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    site = Site(sshd, tmp_path)
    inv = write_inventory(tmp_path, site)
    proc = start(inv, sshd.ssh_config, runs, "bisect", "--host", "gpu", "--budgets", "8,16",
                 "--tasks", TASKS)
    wait_cells(runs, proc, 1)
    deadline = time.monotonic() + 60
    while not procs_with(f"--port\x00{site.port}\x00") and time.monotonic() < deadline:
        time.sleep(0.05)  # the next cell's server is up
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert (site.workdir / "lock").exists()
    assert procs_with(f"--port\x00{site.port}\x00"), "the dead run left no server to clean up"
    # a new, unrelated run: no --break-lock needed for a lock whose owner provably died
    code, doc = bisect_json(capsys, inv, sshd.ssh_config, "--host", "gpu", "--budgets", "8",
                            "--plan")
    code, doc = bisect_json(capsys, inv, sshd.ssh_config, "--host", "gpu", "--budgets", "8")
    assert code == 0, doc
    assert any("took over the lock of a run that died" in n for n in doc["notes"]), doc["notes"]
    assert_clean(inv, site)


def test_a_sweep_with_errored_cells_exits_5_and_resumes_them(sshd, tmp_path: Path, runs: Path,
                                                             capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    site = Site(sshd, tmp_path)
    inv = write_inventory(tmp_path, site)
    busy = socket.socket()
    busy.bind(("127.0.0.1", site.port))
    busy.listen(1)  # someone else's server holds the port: every cell is an infra error
    try:
        code = main(["-i", str(inv), "--ssh-config", str(sshd.ssh_config), "sweep", "--host",
                     "gpu", "--budgets", "8,16", "--graph", "on", "--tasks", TASKS, "--json"])
    finally:
        busy.close()
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert code == 5, err
    assert {c["outcome"] for c in doc["cells"]} == {"error"}
    assert f"sweep --resume {doc['run_id']}" in err
    code = main(["-i", str(inv), "--ssh-config", str(sshd.ssh_config), "sweep", "--resume",
                 doc["run_id"], "--json"])
    out, err = capsys.readouterr()
    assert out.strip(), err
    doc2 = json.loads(out)
    assert code == 1, err  # b16 with graphs crashes: a real result now
    m = {(r["budget"], v): e["outcome"] for r in doc2["rows"] for v, e in r["entries"].items()}
    assert m == {(8, "graph"): "ok", (16, "graph"): "crash"}, m
    assert_clean(inv, site)
