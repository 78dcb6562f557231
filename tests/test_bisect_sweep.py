"""`ddprobe sweep`: the full matrix over a real SSH host running the testbed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from bisect_util import TASKS, Site, assert_clean, ddprobe, write_inventory

from ddprobe.exitcodes import ExitCode
from ddprobe.store import load_run

pytestmark = pytest.mark.ssh


def test_sweep_matrix_budget_by_graph(sshd: object, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DDPROBE_RUNS", str(tmp_path / "runs"))
    site = Site(sshd, tmp_path)
    inv = write_inventory(tmp_path, site)
    code = ddprobe(inv, sshd.ssh_config, "sweep", "--host", "gpu",  # type: ignore[attr-defined]
                   "--budgets", "16,8", "--graph", "both", "--tasks", TASKS, "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == int(ExitCode.FAILED)  # b16 with graphs crashes
    assert doc["variants"] == ["graph", "eager"]
    m = {(r["budget"], v): e for r in doc["rows"] for v, e in r["entries"].items()}
    assert m[(8, "graph")]["outcome"] == "ok" and m[(8, "graph")]["coding"] == "3/3"
    assert m[(8, "graph")]["accept_length"] > 2
    assert m[(16, "graph")]["outcome"] == "crash"
    assert m[(16, "graph")]["signature"].startswith("cuda_illegal_address")
    assert m[(16, "eager")]["outcome"] == "ok"
    assert doc["restarts_used"] == 4
    rec = load_run(Path(doc["run_dir"]))
    assert rec.meta["command"] == "sweep" and len(rec.cells) == 4 and rec.finished
    assert (Path(doc["run_dir"]) / "report.md").is_file() or rec.notes
    assert_clean(inv, site)
    # the human table: one row per budget, a column per graph mode
    code = ddprobe(inv, sshd.ssh_config, "sweep", "--host", "gpu",  # type: ignore[attr-defined]
                   "--budgets", "8", "--graph", "on", "--tasks", "reverse_words")
    out = capsys.readouterr().out
    assert code == 0 and "accept" in out and "graph" in out and "coding 1/1" in out


@pytest.mark.parametrize("scenario", ["nondet", "stale"])
def test_sweep_decides_which_side_of_a_divergence_with_deterministic_eager(
        scenario: str, sshd: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A graph/eager divergence, then eager with --enable-deterministic-inference (the testbed's
    SGLang lists its default backend, triton, in DETERMINISTIC_ATTENTION_BACKEND_CHOICES).
    Expected, written before the run: nondet (eager's reduction order varies per process)
    -> the deterministic eager differs from eager, so the graph cell stays ok and the sweep
    exits 0; stale (graphs flip tokens, eager deterministic) -> identical, the graph cell
    garbage, exit 1. One extra restart in both."""
    monkeypatch.setenv("DDPROBE_RUNS", str(tmp_path / "runs"))
    site = Site(sshd, tmp_path, scenario=scenario)
    inv = write_inventory(tmp_path, site)
    code = ddprobe(inv, sshd.ssh_config, "sweep", "--host", "gpu",  # type: ignore[attr-defined]
                   "--budgets", "16", "--graph", "both", "--tasks", "8", "--json")
    doc = json.loads(capsys.readouterr().out)
    m = {(r["budget"], v): e for r in doc["rows"] for v, e in r["entries"].items()}
    g = m[(16, "graph")]
    rec = load_run(Path(doc["run_dir"]))
    side = [c for c in rec.cells if "--enable-deterministic-inference" in (c.launch or [])]
    assert len(side) == 1 and not side[0].config.graph, [c.config.key for c in rec.cells]
    assert side[0].config.backend == "triton"
    assert doc["restarts_used"] == 3
    graph = next(c for c in rec.cells if c.config.graph)
    assert graph.differential and graph.differential["side_cell"]["key"] == side[0].config.key
    if scenario == "nondet":
        assert "eager is not deterministic" in g["which_side"], g
        assert g["outcome"] == "ok" and code == 0
    else:
        assert "eager is right and deterministic" in g["which_side"], g
        assert g["outcome"] == "garbage" and code == int(ExitCode.FAILED)
