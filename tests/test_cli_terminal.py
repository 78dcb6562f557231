"""What a terminal shows (issue 24): the live bar of restarts done / planned on a real pty, the
sweep's own label and plurals, COLUMNS honoured, an HTML report not dumped on a terminal."""
from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bisect_util import TASKS, Site, write_inventory

DDPROBE = str(Path(sys.executable).with_name("ddprobe"))
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def on_pty(argv: list[str], env: dict[str, str], *, columns: int = 150,
           timeout: float = 300) -> tuple[int, str]:
    """Run argv with stdout and stderr on one real pty; (exit code, what the terminal got,
    escape sequences removed)."""
    master, slave = pty.openpty()
    import fcntl
    import struct
    import termios
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    e = {**os.environ, "TERM": "xterm-256color", **env}
    e.pop("NO_COLOR", None)
    p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=e,
                         close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([master], [], [], 0.5)
        if r:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the pty
                break
            if not data:
                break
            chunks.append(data)
        elif p.poll() is not None:
            break
    code = p.wait(timeout=30)
    os.close(master)
    return code, ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))


@pytest.mark.ssh
def test_sweep_on_a_terminal_shows_the_bar_and_its_own_label(sshd: object, tmp_path: Path,
                                                             runs: Path) -> None:
    site = Site(sshd, tmp_path, scenario="healthy")
    inv = write_inventory(tmp_path, site)
    code, screen = on_pty([DDPROBE, "-i", str(inv), "--ssh-config",
                           str(sshd.ssh_config),  # type: ignore[attr-defined]
                           "sweep", "--host", "gpu", "--budgets", "8,16", "--graph", "on",
                           "--tasks", TASKS], {})
    assert code == 0, screen[-3000:]
    # the bar's counts: restarts done / planned (with the time the rest may take once one
    # cell has finished); the sweep's own label; plurals right
    assert "0/2 restarts" in screen and "1/2 restarts" in screen, screen[-3000:]
    assert "Sweep: 2 restarts left" in screen and "Sweep: 1 restart left" in screen
    assert "Bisecting" not in screen and "configs" not in screen
    assert re.search(r"1/2 restarts, ~\d+s left at most", screen), screen[-3000:]


def test_an_html_report_to_a_terminal_is_written_to_a_file(tmp_path: Path) -> None:
    import shutil
    run = Path(__file__).parent / "data" / "journal-old-bisect"
    shutil.copytree(run, tmp_path / run.name)
    (tmp_path / run.name / "report.html").unlink()
    code, screen = on_pty([DDPROBE, "report", run.name, "--format", "html"],
                          {"DDPROBE_RUNS": str(tmp_path)})
    assert code == 0, screen
    written = tmp_path / run.name / "report.html"
    assert "<html" not in screen.lower() and str(written) in screen.replace("\n", ""), screen
    assert written.read_text().lstrip().lower().startswith("<!doctype html")
    # to a pipe it is the document itself, as before
    res = subprocess.run([DDPROBE, "report", run.name, "--format", "html"], capture_output=True,
                         text=True, env={**os.environ, "DDPROBE_RUNS": str(tmp_path)},
                         timeout=120)
    assert res.returncode == 0 and res.stdout.lstrip().lower().startswith("<!doctype html")


LONG = "testbed-node-frankfurt-17"


def test_columns_60_keeps_host_names_whole(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  {LONG}: {{host: 10.0.0.1}}\n")
    for run in ("pty", "pipe"):
        if run == "pty":
            code, out = on_pty([DDPROBE, "-i", str(inv), "hosts"], {"COLUMNS": "60"},
                               columns=60)
        else:
            res = subprocess.run([DDPROBE, "-i", str(inv), "hosts"], capture_output=True,
                                 text=True, env={**os.environ, "COLUMNS": "60"}, timeout=120)
            code, out = res.returncode, res.stdout
        assert code == 0
        assert LONG in out and "…" not in out.split(LONG)[0].rsplit("\n", 1)[-1], out
        table = [ln for ln in out.splitlines() if not ln.startswith("inventory:")]
        assert max(len(ln) for ln in table) <= 60, out


def test_a_piped_bisect_verdict_table_honours_columns(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    import io

    from planner_util import seed, spec
    from report_util import bisect_model
    from rich.console import Console

    from ddprobe.bisect.planner import simulate
    from ddprobe.bisect.verdicts import build_verdicts
    from ddprobe.report.terminal import render_bisect
    p, _ = simulate(spec(), seed)
    m = bisect_model(tmp_path, build_verdicts(p, host="h"), [8, 16, 32, 64])
    monkeypatch.setenv("COLUMNS", "80")
    buf = io.StringIO()
    render_bisect(m, Console(file=buf, width=80))  # a pipe: not a terminal
    table = buf.getvalue().split("\n1. ", 1)[0].splitlines()
    assert max(len(ln) for ln in table) <= 80, "\n".join(table)
    # kinds are never broken mid-word
    assert any("buffer_sizing" in ln for ln in table) and any("graph_capture" in ln
                                                              for ln in table)
