"""`ddprobe bisect log` / `replay`: the session log from a real journal on disk, replayed."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from planner_util import seed, spec

from ddprobe.bisect.planner import Planner
from ddprobe.bisect.sessionlog import parse_key, render_log, replay
from ddprobe.bisect.verdicts import build_verdicts
from ddprobe.cli import main
from ddprobe.errors import ConfigError
from ddprobe.store import RunStore, load_run


def _journal(tmp: Path) -> Path:
    """A finished bisect run written through the run store, as the engine writes it."""
    store = RunStore.create("bisect", tmp / "runs")
    store.append({"type": "run", "run_id": store.run_id, "command": "bisect",
                  "hosts": ["gpu-a"], "budgets": [8, 16, 32, 64], "started_at": "now",
                  "options": {"budgets": [8, 16, 32, 64], "max_bs": 64, "repeat": 1}})
    p = Planner(spec())
    n = 0
    while True:
        cells = p.next_cells(1)
        if not cells:
            break
        for c in cells:
            n += 1
            r = seed(c)
            r = replace(r, host="gpu-a", plan=c.to_dict(), group="g", round=n,
                          purpose=c.purpose)
            p.record(c, r)
            store.cell(r)
    for v in build_verdicts(p, host="gpu-a"):
        store.verdict(v)
    store.append({"type": "end", "restarts_used": n, "restarts_full_sweep": 8, "rounds": n,
                  "status": "bad", "exit_code": 1})
    return store.dir


def test_log_is_git_bisect_shaped_and_replays_to_the_same_verdicts(tmp_path: Path) -> None:
    rec = load_run(_journal(tmp_path))
    text = render_log(rec)
    lines = text.splitlines()
    assert lines[1].startswith("ddprobe bisect start --host gpu-a --budgets 8,16,32,64")
    assert "# good: [b8-graph-bs64] ok" in text
    assert "ddprobe bisect good b8-graph-bs64" in lines
    assert any(ln.startswith("ddprobe bisect bad b16-graph-bs64 --mode 'crash "
                             "cuda_illegal_address:") for ln in lines)
    assert "# first bad config: [b16-graph-bs64]" in text
    assert "# verdict [gpu-a]: b16 buffer_sizing (oversize experiment, high): "\
           "cuda_graph_custom_mask at srt/layers/attention/triton_backend.py:118" in text
    ((session, planner, verdicts),) = replay(text)
    assert session.spec.small_max_bs == 16
    got = {tuple(v.budgets): (v.kind, v.decided_by) for v in verdicts}
    want = {tuple(v.budgets): (v.kind, v.decided_by) for v in rec.verdicts}
    assert got == want


def test_an_edited_log_replays_differently(tmp_path: Path) -> None:
    text = render_log(load_run(_journal(tmp_path)))
    # a reviewer doubts the oversize cell: drop it, the b16 mode is no longer decided
    edited = "\n".join(ln for ln in text.splitlines() if "oversize[" not in ln)
    ((_, _, verdicts),) = replay(edited)
    v16 = next(v for v in verdicts if v.budgets == [16])
    assert v16.kind != "buffer_sizing"


def test_cli_log_and_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = _journal(tmp_path)
    monkeypatch.setenv("DDPROBE_RUNS", str(tmp_path / "runs"))
    assert main(["bisect", "log", run_dir.name]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# ddprobe bisect log: run " + run_dir.name)
    f = tmp_path / "session.txt"
    f.write_text(out)
    assert main(["bisect", "replay", str(f)]) == 0
    out = capsys.readouterr().out
    assert "graph_capture" in out and "cuda_graph_custom_mask" in out


def test_bad_log_lines_name_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"x.txt:2: .*not a `ddprobe bisect` command"):
        replay("ddprobe bisect start --host h --budgets 8,16\nrm -rf /\n", "x.txt")
    with pytest.raises(ConfigError, match=r"x.txt:1: .*before `ddprobe bisect start`"):
        replay("ddprobe bisect good b8-graph\n", "x.txt")
    with pytest.raises(ConfigError, match="not a cell key"):
        parse_key("sixteen-graph", 3, "x.txt")
    cfg, bufs, patch, san, rep = parse_key("b16-graph-bs64-fa3+oversize[a,b]#2", 1, "x")
    assert (cfg.budget, cfg.max_bs, cfg.backend, bufs, rep) == (16, 64, "fa3", ("a", "b"), 2)
