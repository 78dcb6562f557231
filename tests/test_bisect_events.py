"""`ddprobe bisect --events`: the run as an NDJSON event stream, read while it runs, over the
testbed behind a real loopback sshd (the seed scenario)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bisect_util import REPO, TASKS, Site, assert_clean, ddprobe, write_inventory

from ddprobe.exitcodes import ExitCode

pytestmark = pytest.mark.ssh


def test_a_reader_acts_on_each_verdict_while_the_bisect_goes_on(
        sshd: object, tmp_path: Path, runs: Path) -> None:
    site = Site(sshd, tmp_path)
    inv = write_inventory(tmp_path, site)
    cfg = sshd.ssh_config  # type: ignore[attr-defined]
    env = dict(os.environ, DDPROBE_RUNS=str(runs), PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "ddprobe", "-i", str(inv), "--ssh-config",
                             str(cfg), "bisect", "--host", "gpu", "--budgets", "8,16,32,64",
                             "--tasks", TASKS, "--events", "-"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: list[dict] = []
    running_at: dict[tuple[int, ...], bool] = {}  # verdict -> was ddprobe still running
    assert proc.stdout is not None
    try:
        for raw in proc.stdout:  # one JSON object a line, as it happens
            d = json.loads(raw)
            lines.append(d)
            if d["type"] == "verdict_final":
                # what a script would do here: act on this budget's verdict (deploy b64 with
                # the smaller max bs) while ddprobe goes on testing the others
                running_at[tuple(d["budgets"])] = proc.poll() is None
        err = proc.stderr.read() if proc.stderr else ""
    finally:
        proc.wait(timeout=120)
    assert proc.returncode == int(ExitCode.FAILED), err[-3000:]
    kinds = [d["type"] for d in lines]
    assert kinds[-1] == "result" and kinds.count("result") == 1
    result = lines[-1]
    assert result["exit_code"] == int(ExitCode.FAILED)
    assert {v["kind"] for v in result["verdicts"]} >= {"ok", "buffer_sizing", "graph_capture"}
    finals = [(i, d) for i, d in enumerate(lines) if d["type"] == "verdict_final"]
    # each announced verdict is one the run ended with, word for word, and every end verdict
    # was announced
    end = list(result["verdicts"])
    bodies = [{k: v for k, v in d.items() if k not in ("type", "final", "group", "t")}
              for _, d in finals]
    assert all(b in end for b in bodies) and len(bodies) == len(end)
    # the first verdicts came while ddprobe was still running, cells started after them
    i0, d0 = finals[0]
    assert running_at[tuple(d0["budgets"])]
    started_after = [d["cell"] for d in lines[i0:] if d["type"] == "cell_start"]
    assert started_after, "every verdict came at the end"
    # every cell is in the stream, started then done, with its outcome
    done = [d for d in lines if d["type"] == "cell_done"]
    assert [d["cell"] for d in done] == [d["cell"] for d in lines if d["type"] == "cell_start"]
    assert len(done) == result["restarts_used"] and all(d["result"]["outcome"] for d in done)
    # the stream's verdict lines are the journal's
    journal = Path(result["run_dir"]) / "journal.jsonl"
    jfinals = [json.loads(x) for x in journal.read_text().splitlines() if '"verdict_final"' in x]
    assert [tuple(f["budgets"]) for f in jfinals] == [tuple(d["budgets"]) for _, d in finals]
    assert_clean(inv, site)


def test_events_to_a_file_keep_the_json_document_on_stdout(
        sshd: object, tmp_path: Path, runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site = Site(sshd, tmp_path, scenario="healthy")
    inv = write_inventory(tmp_path, site)
    cfg = sshd.ssh_config  # type: ignore[attr-defined]
    ev = tmp_path / "events.ndjson"
    code = ddprobe(inv, cfg, "bisect", "--host", "gpu", "--budgets", "8,16,32,64", "--tasks",
                   TASKS, "--json", "--events", str(ev))
    doc = json.loads(capsys.readouterr().out)  # --json: one document, as before
    lines = [json.loads(x) for x in ev.read_text().splitlines()]
    assert code == 0 and lines[-1]["type"] == "result" and lines[-1]["exit_code"] == 0
    assert {k: v for k, v in lines[-1].items() if k not in ("type", "exit_code", "t")} == doc
    assert sorted(d["budgets"] for d in lines if d["type"] == "verdict_final") == [
        [8, 16, 32], [64]]


def test_events_refusals_and_errors_are_one_line(sshd: object, tmp_path: Path, runs: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    site = Site(sshd, tmp_path, scenario="healthy")
    inv = write_inventory(tmp_path, site)
    cfg = sshd.ssh_config  # type: ignore[attr-defined]
    base = ("bisect", "--host", "gpu", "--budgets", "8,16")
    assert ddprobe(inv, cfg, *base, "--events", "-", "--json") == int(ExitCode.USAGE)
    assert ddprobe(inv, cfg, *base, "--events", "-", "--plan") == int(ExitCode.USAGE)
    assert ddprobe(inv, cfg, *base, "--events", str(tmp_path / "no" / "dir.ndjson")) == \
        int(ExitCode.USAGE)
    err = capsys.readouterr().err
    assert "give one of them" in err and "--plan runs nothing" in err
    assert "cannot write" in err and "Traceback" not in err
    # an error once the stream is open ends it with an `error` line
    assert ddprobe(inv, cfg, "bisect", "--host", "gpu", "--budgets", "8,16", "--events", "-",
                   "--resume", "no-such-run") == int(ExitCode.CONFIG)
    out = capsys.readouterr().out.splitlines()
    last = json.loads(out[-1])
    assert len(out) == 1 and last["type"] == "error"
    assert last["error"] == {**last["error"], "kind": "ConfigError",
                             "exit_code": int(ExitCode.CONFIG)}
    assert "no-such-run" in last["error"]["message"]
