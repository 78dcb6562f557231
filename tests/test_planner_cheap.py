"""Cheap cells in the planner: which cells run cheap, what a cheap result answers, and that
the verdicts are the same as with every cell at full cost (pure: simulated results)."""
from __future__ import annotations

from dataclasses import replace

from planner_util import cheap_seed, seed, spec

from ddprobe.bisect.costs import CostModel
from ddprobe.bisect.planner import simulate
from ddprobe.bisect.verdicts import build_verdicts


def summary(vs: list) -> list[tuple]:
    return [(tuple(v.budgets), v.kind, v.signature, (v.buffer or {}).get("attr"), v.tested)
            for v in vs]


def test_seed_cheap_cells_keep_the_verdicts_and_need_six_real_restarts() -> None:
    # expected before running: cheap b64 (cuBLAS crash), b16 (illegal address), b8 and b32
    # (no crash: then real), the b16 oversize and the b64 max-bs experiments cheap (a crash
    # mode's experiment is decided either way); real: b8, b32, b32 eager, b32 oversize x16
    # (straight to the escalated factor: failing, x4 cannot change the verdict), and what
    # each cure leaves: b16's oversize and b64's max bs 16 again with the real weights (a
    # cheap cure says only "no crash"; at b64 the cured cell fails like b32: a second defect)
    p_off, _ = simulate(spec(), seed)
    p_on, rounds = simulate(spec(cheap=True), cheap_seed)
    keys = [c.key for r in rounds for c in r]
    assert summary(build_verdicts(p_on)) == summary(build_verdicts(p_off))
    cheap = [k for k in keys if k.endswith("+cheap")]
    real = [k for k in keys if not k.endswith("+cheap")]
    assert cheap == ["b64-graph-bs64+cheap", "b16-graph-bs64+cheap", "b8-graph-bs64+cheap",
                     "b32-graph-bs64+cheap",
                     "b16-graph-bs64+oversize[cuda_graph_custom_mask]+cheap",
                     "b64-graph-bs16+cheap"]
    assert real == ["b8-graph-bs64", "b32-graph-bs64", "b32-eager-bs64",
                    "b32-graph-bs64+oversize[cuda_graph_custom_mask]x16",
                    "b16-graph-bs64+oversize[cuda_graph_custom_mask]", "b64-graph-bs16"]
    kinds = [(v.budgets[0], v.kind, v.decided_by) for v in build_verdicts(p_on)]
    assert kinds == [(8, "ok", "frontier search"), (16, "buffer_sizing", "oversize experiment"),
                     (32, "graph_capture", "oversize experiment"),
                     (64, "buffer_sizing", "max-bs experiment"),
                     (64, "graph_capture", "cured cell")]


def test_a_no_crash_cheap_result_never_makes_a_frontier_cell_ok() -> None:
    p, rounds = simulate(spec(cheap=True), cheap_seed)
    b8 = p.obs(p.frontier_cell(8))
    assert b8.status == "good" and b8.first is not None and not b8.first.cheap


def test_cheap_cells_are_not_planned_when_they_would_not_save_time() -> None:
    # a host where a dummy-weight start costs as much as a real one: nothing runs cheap
    flat = CostModel(defaults={"start": 1.0, "load": 10.0, "load_dummy": 10.0,
                               "capture_per_bs": 0.0, "health": 1.0, "probes": 1.0,
                               "probes_cheap": 1.0, "stop": 1.0})
    _, rounds = simulate(spec(cheap=True, cost=flat), cheap_seed)
    keys = [c.key for r in rounds for c in r]
    # (even a crash mode's experiment, which a cheap run decides for sure: at the same cost
    # the real run is never worse)
    assert not [k for k in keys if k.endswith("+cheap")]
    assert len(keys) == 8  # today's 9 less the b32 oversize x4 (straight to x16)


def test_repeat_turns_cheap_cells_off() -> None:
    _, rounds = simulate(spec(cheap=True, repeat=2), cheap_seed)
    assert not any(c.cheap for r in rounds for c in r)


def test_every_verdict_names_its_cheap_cells_and_says_what_they_showed() -> None:
    p, _ = simulate(spec(cheap=True), cheap_seed)
    vs = {v.budgets[0]: v for v in build_verdicts(p)}
    # b16's oversize ran cheap and then real (what the cure leaves): the real run is the one
    # the verdict stands on, so only the frontier cell is named cheap
    assert vs[16].cheap_cells == ["b16-graph-bs64"]
    assert vs[8].cheap_cells == [] and vs[32].cheap_cells == []  # real cells decided them
    text = " ".join(e.summary for e in vs[16].evidence)
    assert "b16 fails (crash cuda_illegal_address: CUDA error: an illegal memory access was " \
        "encountered (cheap cell: dummy weights))" in text
    # the cure's pass is the real run's (a cheap one could say only "avoids this crash")
    assert "with cuda_graph_custom_mask x4 (temporary patch, reverted) b16 passes (ok)" in text
    assert "avoids this crash (cheap cell" not in text
    assert "ran cheap (dummy weights, the batch sizes the question needs, no warm-up): " \
        "b16-graph-bs64;" in text
    assert vs[16].to_dict()["cheap_cells"] and "cheap_cells" not in vs[8].to_dict()


def test_below_a_pass_or_a_failure_that_is_no_crash_frontier_cells_run_real() -> None:
    # a kernel defect garbling every budget from 16 up, graphs or not (no crash anywhere):
    # only the top budget, with nothing known above it, is tried cheap; below b64's garbage
    # (and below a pass) a crash is unlikely, so the real cell runs first
    from ddprobe.bisect.synthetic import threshold
    s = spec(cheap=True)
    sim = threshold(s, 16, "kernel")
    _, rounds = simulate(s, lambda c: replace(sim(c), cheap=c.cheap or None))
    keys = [c.key for r in rounds for c in r]
    assert [k for k in keys if k.endswith("+cheap")] == ["b64-graph-bs64+cheap"], keys
    _, rounds = simulate(s, threshold(s, None, "kernel"))  # everything passes: 1 cheap + b64
    assert [c.key for r in rounds for c in r] == ["b64-graph-bs64+cheap", "b64-graph-bs64"]


def test_the_inventory_turns_cheap_cells_off_per_host(tmp_path) -> None:
    from ddprobe.bisect.cheap import host_support
    from ddprobe.errors import ConfigError
    from ddprobe.inventory import load_inventory
    from ddprobe.results import Config
    from ddprobe.server.caches import RunCaches
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts:\n  a:\n    host: a.example\n    server:\n      cheap_cells: false\n"
                   "  b:\n    host: b.example\n")
    hosts = load_inventory(inv)
    a, b = hosts.get("a"), hosts.get("b")
    assert (a.server.cheap_cells, b.server.cheap_cells) == (False, True)
    # decided before the host is contacted (no connection is needed to say no)
    sup = host_support(None, a, Config(8), max_bs=64, concurrency=8, enabled=True,  # type: ignore[arg-type]
                       caches=RunCaches())
    assert not sup.available and "server.cheap_cells false" in sup.note
    inv.write_text("hosts:\n  a:\n    host: a.example\n    server:\n      cheap_cells: maybe\n")
    try:
        load_inventory(inv)
    except ConfigError as e:
        assert "cheap_cells" in str(e) and ":5" in str(e)
    else:
        raise AssertionError("a non-boolean cheap_cells was accepted")


def test_thorough_with_cheap_cells_goes_down_from_the_top() -> None:
    # every budget restarted, all pass: b64 cheap (nothing known), then b32, b16, b8 real
    # (below a pass a crash is unlikely); today's plan restarts the same four
    from ddprobe.bisect.synthetic import threshold
    s = spec(cheap=True, thorough=True)
    _, rounds = simulate(s, threshold(s, None, "kernel"))
    assert [c.key for r in rounds for c in r] == [
        "b64-graph-bs64+cheap", "b64-graph-bs64", "b32-graph-bs64", "b16-graph-bs64",
        "b8-graph-bs64"]


def test_a_cheap_cure_is_not_bet_on_where_the_cure_runs_again_with_real_weights() -> None:
    # a cure a cheap run finds at the mode's first budget is run again with the real weights
    # (what the cure leaves), so the cheap run saves the real one only when the crash stays:
    # on a host where a cheap start costs about 0.6 of a real one (a 60 s weight load) that
    # even bet does not pay, and b16's oversize and b64's max bs run real only. The frontier
    # below a crash (likely a crash too) still runs cheap first; the verdicts are the same
    from ddprobe.bisect.costs import DEFAULTS
    cost = CostModel(defaults={**DEFAULTS, "load": 60.0, "load_dummy": 20.0})
    p_on, rounds = simulate(spec(cheap=True, cost=cost), cheap_seed)
    p_off, _ = simulate(spec(), seed)
    keys = [c.key for r in rounds for c in r]
    assert summary(build_verdicts(p_on)) == summary(build_verdicts(p_off))
    assert "b16-graph-bs64+cheap" in keys  # the bet on a crash below a crash still runs
    experiments = [k for k in keys if "oversize" in k or "-bs16" in k]
    assert experiments == ["b16-graph-bs64+oversize[cuda_graph_custom_mask]",
                           "b32-graph-bs64+oversize[cuda_graph_custom_mask]x16",
                           "b64-graph-bs16"], keys
    # with the default cost model (a 240 s load against 20 s) the even bet pays: cheap first
    _, rounds = simulate(spec(cheap=True), cheap_seed)
    keys = [c.key for r in rounds for c in r]
    assert "b16-graph-bs64+oversize[cuda_graph_custom_mask]+cheap" in keys


def test_a_control_at_another_budget_is_saved_by_its_cheap_cure() -> None:
    # b16 and b32 crash alike (the mask): b32's control (the same oversize) cured by a cheap
    # run agrees with b16's verdict and is not run again, so it goes cheap at the same costs
    from planner_util import GARBAGE, ILLEGAL, res

    from ddprobe.bisect.costs import DEFAULTS
    cost = CostModel(defaults={**DEFAULTS, "load": 60.0, "load_dummy": 20.0})

    def crash(c):
        if c.config.budget >= 16 and c.config.graph and "cuda_graph_custom_mask" not in c.buffers:
            return replace(res(c, "crash", ILLEGAL), cheap=c.cheap or None)
        return replace(res(c, "ok") if not c.cheap else res(c, "garbage", GARBAGE),
                       cheap=c.cheap or None)

    _, rounds = simulate(spec(cheap=True, cost=cost), crash)
    keys = [c.key for r in rounds for c in r]
    assert "b16-graph-bs64+oversize[cuda_graph_custom_mask]" in keys
    assert "b16-graph-bs64+oversize[cuda_graph_custom_mask]+cheap" not in keys
    ctl = [k for k in keys if "oversize" in k and not k.startswith("b16")]
    assert ctl and all(k.endswith("+cheap") for k in ctl), keys
