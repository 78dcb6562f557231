"""Output conventions: `--json` has one shape for one host and many; tables written to a pipe
are not cut at 80 columns; the overall progress bar counts cells done of planned with a time
estimate. Expected values written before running."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from ddprobe.bisect.engine import Event
from ddprobe.cli import main
from ddprobe.report.live import EventRenderer
from ddprobe.results import CellResult, Config, Outcome


def test_facts_json_has_one_shape_for_one_host_and_many(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  here: {{transport: local, python: {sys.executable}}}\n")
    assert main(["-i", str(inv), "facts", "--host", "here", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert main(["-i", str(inv), "facts", "--host", "here,testbed", "--json"]) == 0
    two = json.loads(capsys.readouterr().out)
    assert list(one) == list(two) == ["hosts"]
    assert [h["host"] for h in one["hosts"]] == ["here"]
    assert [h["host"] for h in two["hosts"]] == ["here", "testbed"]
    assert set(one["hosts"][0]) == set(two["hosts"][0])


def test_tables_to_a_pipe_are_not_cut_at_80_columns(tmp_path: Path) -> None:
    name = "gpu-node-with-a-rather-long-name-in-datacenter-frankfurt-rack-17-slot-04"
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  {name}: {{host: 10.1.2.3, python: /opt/some/very/long/venv/"
                   "path/for/sglang-0.5.10/bin/python3.12}\n")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    out = subprocess.run([sys.executable, "-m", "ddprobe", "-i", str(inv), "hosts"],
                         capture_output=True, text=True, env=env, timeout=60).stdout
    row = next(ln for ln in out.splitlines() if name in ln)  # the whole name on one line
    assert "/opt/some/very/long/venv/path/for/sglang-0.5.10/bin/python3.12" in row
    assert len(row) > 80


def test_progress_bar_counts_cells_and_estimates_the_rest() -> None:
    con = Console(file=io.StringIO(), force_terminal=True, width=150)
    with EventRenderer(con) as ren:
        ren(Event("progress", "g", "at most 5 configs left", {"configs_left": 5}))
        task = ren._progress.tasks[0]
        assert (task.completed, task.total) == (0, 5) and task.fields["counts"] == "0/5 restarts"
        res = CellResult("h", Config(8), Outcome.OK, wall_s=90.0)
        ren(Event("cell_done", "g", "h: b8-graph", {"result": res}))
        task = ren._progress.tasks[0]
        # 1 done, 4 left in the worst case at 90 s a cell
        assert (task.completed, task.total) == (1, 5)
        assert task.fields["counts"] == "1/5 restarts, ~6m00s left at most"
        ren(Event("progress", "g", "at most 2 configs left", {"configs_left": 2}))
        assert ren._progress.tasks[0].total == 3
