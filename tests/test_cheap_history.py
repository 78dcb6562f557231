"""Cheap cells by the host's cost history: a bisect over the real sshd fixture and the testbed,
twice in one runs directory, the second run planning from the first run's phase times.

A cheap cell is worth running first only where the chance it decides the question times the
real cell it saves beats its cost. With nothing learned (the default cost model: a 240 s
weight load against a 20 s dummy one) the top budget, with nothing known above it (even odds
of a crash), runs cheap first. Once the journal shows that on this host a dummy-weight start
costs nearly a real one (as on real SGLang with a tiny model, docs/gpu-results.md), the next
run does not bet; where it shows dummy weights are cheap, it still does.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from bisect_util import Site, bisect_json, write_inventory

from ddprobe.bisect.costs import CostModel, host_history

pytestmark = pytest.mark.ssh

TINY = """name: tiny-start
description: healthy, but a dummy-weight start takes as long as a real one
gpu: {name: NVIDIA H200, arch: sm_90, memory_gib: 141, count: 1}
model: {name: tiny, context_len: 32768, vocab_size: 32000, hidden_size: 1024,
        num_layers: 4, num_heads: 8, weights_gib: 1, kv_bytes_per_token: 4096}
server: {cuda_graph_max_bs: 64, max_running_requests: 64, mem_fraction_static: 0.85}
timing: {load_s: 330, dummy_load_fraction: FRACTION, capture_per_bs_s: 1.5}
defects: {}
"""


def test_cost_model_caps_an_unlearned_cheap_phase_at_the_real_one() -> None:
    # a history of real cells only, with a 2 s weight load and 3 s probes: a cheap cell's
    # load and probes cannot be estimated above them (the default 20 s dummy load is for a
    # tens-of-GB model); with no history the defaults stand
    from ddprobe.bisect.costs import DEFAULTS, PastCell
    from ddprobe.cell.phases import CellPhases
    ph = CellPhases({"start": 1.0, "load": 2.0, "capture": 24.0, "health": 5.0,
                     "probes": 3.0, "stop": 1.0}, from_log=("load", "capture"))
    m = CostModel((PastCell(ph, graph=True, cheap=False, captured=12),))
    cheap = m.estimate(graph=True, cheap=True, captured=5).seconds
    assert cheap["load"] == 2.0 and cheap["probes"] == 3.0
    none = CostModel().estimate(graph=True, cheap=True).seconds
    assert none["load"] == DEFAULTS["load_dummy"] and none["probes"] == DEFAULTS["probes_cheap"]


@pytest.mark.parametrize("fraction,second", [
    (1.0, ["b64-graph", "b64-eager"]),  # dummy weights save nothing: no bet
    (0.02, ["b64-graph+cheap", "b64-graph", "b64-eager"]),  # they do: the bet still pays
])
def test_the_second_run_bets_on_a_cheap_cell_only_where_the_history_says_it_pays(
        sshd: object, tmp_path: Path, runs: Path, capsys: pytest.CaptureFixture[str],
        fraction: float, second: list[str]) -> None:
    scen = tmp_path / "tiny-start.yaml"
    scen.write_text(TINY.replace("FRACTION", str(fraction)))
    site = Site(sshd, tmp_path, scenario=str(scen))
    # start-up at 0.02: a 330 s load is 6.6 s, the greater part of a restart here
    inv = write_inventory(tmp_path, entries=[site.entry_with({"DDTESTBED_STARTUP_SCALE": "0.02"})])
    cfg = sshd.ssh_config  # type: ignore[attr-defined]
    args = ("--host", "gpu", "--budgets", "8,16,32,64", "--exit-protocol", "bisect")
    code, doc = bisect_json(capsys, inv, cfg, *args)
    assert code == 0
    # nothing learned yet: even odds of a crash at the top, a cheap start far below a real one
    assert [c["key"] for c in doc["groups"][0]["cells"]] == ["b64-graph+cheap", "b64-graph",
                                                             "b64-eager"]
    # what the first run's journal shows: the premise of the second run's choice
    model = CostModel(host_history(runs, "gpu"))
    real = model.estimate(graph=True, cheap=False).total
    cheap = model.estimate(graph=True, cheap=True, captured=5).total
    bets = cheap < 0.5 * real
    assert bets == (fraction < 1.0), (cheap, real)
    code, doc = bisect_json(capsys, inv, cfg, *args)
    assert code == 0
    assert [c["key"] for c in doc["groups"][0]["cells"]] == second
    assert [(v["kind"], v["budgets"]) for v in doc["verdicts"]] == [
        ("ok", [64]), ("ok", [8, 16, 32])]
