"""The bisect planner on synthetic outcome tables (pure: no host, no server)."""
from __future__ import annotations

from dataclasses import replace

import pytest
from planner_util import BUDGETS, CUBLAS, GARBAGE, ILLEGAL, MASK, res, seed, spec

from ddprobe.bisect.cells import FLAKY, PlannedCell, mode_key, observe
from ddprobe.bisect.frontier import build_row, probes
from ddprobe.bisect.ladder import failure_class
from ddprobe.bisect.planner import BisectSpec, Planner, PlanOptions, simulate, small_max_bs_for
from ddprobe.bisect.plantext import plan_lines
from ddprobe.bisect.static import Suspect
from ddprobe.bisect.synthetic import restarts_for, threshold
from ddprobe.bisect.verdicts import build_verdicts, exit_code, run_status
from ddprobe.errors import UsageError
from ddprobe.exitcodes import ExitCode
from ddprobe.results import CellResult, Config, Outcome, Signature


def by_kind(verdicts: list) -> dict[str, list]:
    out: dict[str, list] = {}
    for v in verdicts:
        out.setdefault(v.kind, []).append(v)
    return out


def test_seed_three_modes_four_verdicts_in_eight_restarts() -> None:
    p, rounds = simulate(spec(), seed)
    vs = {tuple(v.budgets): v for v in build_verdicts(p)}
    assert vs[(8,)].kind == "ok"
    assert vs[(16,)].kind == "buffer_sizing" and vs[(16,)].decided_by == "oversize experiment"
    assert vs[(16,)].buffer["attr"] == "cuda_graph_custom_mask"
    assert vs[(16,)].buffer["where"] == "srt/layers/attention/triton_backend.py:118"
    assert vs[(32,)].kind == "graph_capture" and vs[(32,)].confidence == "high"
    v64 = next(v for v in build_verdicts(p) if v.budgets == [64] and v.kind == "buffer_sizing")
    assert v64.decided_by == "max-bs experiment"
    # once cured (max bs 16), b64 fails like b32: the capture defect is b64's second verdict
    assert vs[(64,)].kind == "graph_capture" and vs[(64,)].decided_by == "cured cell"
    assert any("fails like b32" in e.summary for e in vs[(64,)].evidence)
    adv = v64.advice  # the workaround names the max bs the experiment ran
    assert adv is not None and adv.kind == "workspace" and adv.max_bs == 16 and adv.keep == 8
    # every budget of the seed tested with graphs; b32's oversize x4 did not cure, so it was
    # escalated (x16: the mask's size could not be evaluated) before ruling buffer sizing out
    tested = {c.config.budget for r in rounds for c in r if c.purpose == "frontier"}
    assert tested == set(BUDGETS)
    ov32 = [c for r in rounds for c in r if c.purpose == "oversize" and c.config.budget == 32]
    assert [c.factor for c in ov32] == [None, 16]
    assert sum(len(r) for r in rounds) == len(BUDGETS) * 2 + 1
    assert exit_code(build_verdicts(p)) == 1
    assert exit_code(build_verdicts(p), protocol="bisect") == 1


def test_seed_with_four_identical_hosts_takes_three_rounds() -> None:
    # round 1: the whole row; round 2: the first experiment of each mode (four hosts busy);
    # round 3: b32's escalated oversize (x16), known to be needed only after x4 failed
    _, rounds = simulate(spec(), seed, k=4)
    assert len(rounds) == 3
    assert all(len(r) <= 4 for r in rounds)


def test_seed_evidence_names_the_deciding_cells() -> None:
    p, _ = simulate(spec(), seed)
    v16 = next(v for v in build_verdicts(p) if v.budgets == [16])
    kinds = [e.kind for e in v16.evidence]
    assert kinds[:2] == ["frontier", "signature"] and "static" in kinds and "oversize" in kinds
    ov = next(e for e in v16.evidence if e.kind == "oversize")
    assert ov.cells == ["b16-graph-bs64+oversize[cuda_graph_custom_mask]"]
    v64 = next(v for v in build_verdicts(p) if v.budgets == [64])
    mb = next(e for e in v64.evidence if e.kind == "max_bs")
    assert "avoids this failure (then fails like b32" in mb.summary
    assert mb.cells == ["b64-graph-bs16"]


def test_healthy_needs_one_restart() -> None:
    p, rounds = simulate(spec(), threshold(spec(), None, "buffer"))
    assert [c.key for r in rounds for c in r] == ["b64-graph-bs64"]
    ok, assumed = build_verdicts(p)
    assert ok.kind == "ok" and ok.budgets == [64] and ok.confidence == "high"
    # the budgets never restarted are assumed ok, never at high confidence
    assert assumed.kind == "ok" and assumed.budgets == [8, 16, 32] and not assumed.tested
    assert assumed.confidence == "low" and assumed.decided_by == "assumed (not tested)"
    assert "--thorough" in assumed.next_command
    assert run_status([ok, assumed]) == "good"
    assert exit_code([ok, assumed], protocol="bisect") == 0


def test_kernel_is_decided_by_the_eager_control_and_infers_the_middle() -> None:
    s = spec()
    p, rounds = simulate(s, threshold(s, 16, "kernel"))
    vs = by_kind(build_verdicts(p))
    k, assumed = vs["kernel"]
    # b64 has its own eager control; b32 (between two failures of one mode) is assumed
    assert k.budgets == [16, 64] and k.decided_by == "eager control" and k.tested
    assert any(e.kind == "control" and "b64's own control" in e.summary for e in k.evidence)
    assert assumed.budgets == [32] and not assumed.tested and assumed.confidence == "low"
    keys = [c.key for r in rounds for c in r]
    assert "b32-graph-bs64" not in keys
    assert "b64-eager-bs64" in keys
    assert len(keys) == 5


@pytest.mark.parametrize("kind", ["buffer", "workspace", "kernel"])
@pytest.mark.parametrize("at", BUDGETS)
def test_one_threshold_needs_at_most_four_restarts(kind: str, at: int) -> None:
    s = spec()
    n, _ = restarts_for(s, at, kind)
    p, _ = simulate(s, threshold(s, at, kind))
    want = {"buffer": "buffer_sizing", "workspace": "buffer_sizing", "kernel": "kernel"}[kind]
    fail = [v for v in build_verdicts(p) if v.kind != "ok"]
    assert {v.kind for v in fail} == {want}
    assert sorted(b for v in fail for b in v.budgets) == [b for b in BUDGETS if b >= at]
    # one diagnosis, plus one control per other failing budget that was restarted
    tested = [b for v in fail if v.tested for b in v.budgets]
    assert n <= 3 + len(tested)


def test_capture_threshold_uses_eager_and_oversize() -> None:
    s = spec()
    p, rounds = simulate(s, threshold(s, 32, "capture"))
    (v,) = [v for v in build_verdicts(p) if v.kind != "ok"]
    assert v.kind == "graph_capture" and v.decided_by == "oversize experiment"
    assert v.budgets == [32, 64]
    purposes = [c.purpose for r in rounds for c in r]
    # the eager control at b32 and b64's own; oversize x4 then x16 (the size is unknown)
    assert purposes.count("eager") == 2 and purposes.count("oversize") == 2


def test_late_threshold_with_four_hosts_in_two_rounds() -> None:
    s = spec()
    _, rounds = simulate(s, threshold(s, 64, "buffer"), k=4)
    assert len(rounds) <= 2


def test_eager_first_order_runs_the_control_first() -> None:
    s = spec(order="eager-first")
    p, rounds = simulate(s, threshold(s, 64, "buffer"))
    after_frontier = [c for r in rounds for c in r if c.purpose != "frontier"]
    assert after_frontier[0].purpose == "eager"
    assert build_verdicts(p)[-1].kind == "buffer_sizing"


def test_oversize_bisection_names_one_of_three_suspects() -> None:
    sus = (MASK, replace(MASK, attr="kv_indptr", line=51), replace(MASK, attr="seq_lens",
                                                                     line=85))
    s = spec(suspects=sus)
    p, rounds = simulate(s, threshold(s, 64, "buffer", culprit="seq_lens"))
    v = next(v for v in build_verdicts(p) if v.kind == "buffer_sizing")
    assert v.buffer["attr"] == "seq_lens" and "oversize bisection" in v.decided_by
    oversize = [c.buffers for r in rounds for c in r if c.purpose == "oversize"]
    assert oversize[0] == ("cuda_graph_custom_mask", "kv_indptr", "seq_lens")
    assert len(oversize) == 3  # all, then halving twice


def test_no_suspects_falls_back_to_max_bs_and_eager() -> None:
    s = spec(suspects=())
    p, _ = simulate(s, threshold(s, 32, "capture"))
    v = next(v for v in build_verdicts(p) if v.kind != "ok")
    # nothing could be enlarged: buffer sizing is not ruled out, so no graph_capture verdict
    assert v.kind == "inconclusive" and v.reason == "graph-undecided"
    assert any("no captured buffer" in e.summary for e in v.evidence)
    assert v.would_decide and v.next_command.startswith("ddprobe bisect")


def test_flaky_repeats_give_a_flaky_verdict_not_a_diagnosis() -> None:
    s = spec(repeat=2)
    calls: dict[str, int] = {}

    def answer(c: PlannedCell) -> CellResult:
        calls[c.base_key] = calls.get(c.base_key, 0) + 1
        if c.config.budget == 64 and c.config.graph and calls[c.base_key] == 2:
            return res(c, "crash", ILLEGAL)  # the second repeat disagrees
        return res(c, "ok")

    p, rounds = simulate(s, answer)
    vs = by_kind(build_verdicts(p))
    assert [v.budgets for v in vs["flaky"]] == [[64]]
    assert not ({"buffer_sizing", "graph_capture", "kernel"} & set(vs))
    assert p.obs(p.frontier_cell(64)).status == FLAKY
    assert [b for v in vs["ok"] for b in v.budgets] == [32, 8, 16]
    assert run_status(build_verdicts(p)) == "skip"
    assert exit_code(build_verdicts(p), protocol="bisect") == 125
    assert [c.key for r in rounds for c in r] == ["b64-graph-bs64", "b64-graph-bs64#2",
                                                  "b32-graph-bs64", "b32-graph-bs64#2"]


def test_infrastructure_error_is_a_skip_never_bad() -> None:
    s = spec()

    def answer(c: PlannedCell) -> CellResult:
        if c.config.budget == 32 and c.purpose == "frontier":
            return CellResult("h", c.config, Outcome.ERROR, error="ssh: connection lost")
        return threshold(s, 64, "buffer")(c)

    p, rounds = simulate(s, answer)
    vs = build_verdicts(p)
    fail = [v for v in vs if v.kind not in ("ok",)]
    assert [v.kind for v in fail] == ["buffer_sizing"]
    assert fail[0].budgets == [64]
    fr = [e.summary for e in fail[0].evidence if e.kind == "frontier"]
    assert any("one of b32, b64" in x for x in fr)  # the skip makes the threshold ambiguous
    assert observe([CellResult("h", Config(8), Outcome.ERROR)]).status == "skip"


def test_everything_skipped_is_inconclusive_and_exit_125() -> None:
    s = spec()
    p, _ = simulate(s, lambda c: CellResult("h", c.config, Outcome.ERROR, error="down"))
    vs = build_verdicts(p)
    assert [v.kind for v in vs] == ["inconclusive"]
    assert exit_code(vs, protocol="bisect") == 125 and exit_code(vs) == 6


def test_smallest_budget_failing_is_inconclusive_for_a_threshold_but_classified() -> None:
    s = spec()
    p, _ = simulate(s, threshold(s, 8, "kernel"))
    v, assumed = build_verdicts(p)
    assert v.kind == "kernel" and v.budgets == [8, 16, 64]
    assert assumed.kind == "kernel" and assumed.budgets == [32] and not assumed.tested
    assert any("already fails" in e.summary for e in v.evidence)


def test_refused_budget_is_a_config_error() -> None:
    s = spec()

    def answer(c: PlannedCell) -> CellResult:
        if c.config.budget == 64:
            return CellResult("h", c.config, Outcome.REFUSED, error="--speculative-ddtree-budget"
                              " must be <= 32")
        return res(c, "ok")

    p, _ = simulate(s, answer)
    vs = by_kind(build_verdicts(p))
    assert vs["config_error"][0].budgets == [64]
    assert vs["ok"][0].budgets == [32] and vs["ok"][1].budgets == [8, 16]


def test_frontier_gaps_and_kary_probes() -> None:
    s = spec()
    p = Planner(s)
    row = build_row(BUDGETS, {})
    need, spec_ = probes(row, 4)
    assert need == [3] and sorted(need + spec_) == [0, 1, 2, 3]
    p.record(p.frontier_cell(64), res(p.frontier_cell(64), "crash", ILLEGAL))
    p.record(p.frontier_cell(16), res(p.frontier_cell(16), "crash", CUBLAS))
    row = p.state().row
    assert [g.why for g in row.gaps] == ["frontier", "boundary"]
    assert [c.config.budget for c in p.next_cells(2)] == [8, 32]


def test_mode_key_strips_measured_numbers_from_garbage() -> None:
    a = CellResult("h", Config(32), Outcome.GARBAGE, Signature("garbage", "accept_length=1.01 "
                                                                         "coding 0/5"))
    b = CellResult("h", Config(64), Outcome.GARBAGE, Signature("garbage", "accept_length=1.02 "
                                                                         "coding 0/5"))
    assert mode_key(a) == mode_key(b)
    assert failure_class(CellResult("h", Config(64), Outcome.CRASH, CUBLAS)) == "capacity"
    assert failure_class(CellResult("h", Config(16), Outcome.CRASH, ILLEGAL)) == "memory"


def test_plan_text_and_validation() -> None:
    lines = plan_lines(spec())
    assert "first round: b64-graph-bs64" in "\n".join(lines)
    assert "the full sweep takes 8" in lines[-2]
    assert lines[-1].startswith("  time: about ")
    assert small_max_bs_for(64) == 16 and small_max_bs_for(None) == 8
    with pytest.raises(UsageError):
        BisectSpec((16, 8), Config(8))
    with pytest.raises(UsageError):
        BisectSpec((8,), Config(8), options=PlanOptions(order="sideways"))


def test_remaining_counts_down_to_zero() -> None:
    p = Planner(spec())
    first = p.remaining()
    while True:
        cells = p.next_cells(1)
        if not cells:
            break
        for c in cells:
            p.record(c, seed(c))
    assert first[0] > 0 and p.remaining() == (0, 0)


def test_sanitize_unavailable_is_recorded_as_evidence() -> None:
    s = spec(sanitize=True, sanitize_available=False, sanitize_note="no compute-sanitizer on h")
    p, rounds = simulate(s, seed)
    assert not any(c.purpose == "sanitize" for r in rounds for c in r)
    v16 = next(v for v in build_verdicts(p) if v.budgets == [16])
    (ev,) = [e for e in v16.evidence if e.kind == "sanitize"]
    assert ev.summary == "sanitizer not available: no compute-sanitizer on h"


def test_sanitize_available_adds_one_cell_per_crash_mode() -> None:
    s = spec(sanitize=True, sanitize_available=True)
    _, rounds = simulate(s, seed)
    san = [c for r in rounds for c in r if c.purpose == "sanitize"]
    assert sorted(c.config.budget for c in san) == [16, 64]  # the crash modes, not garbage


def test_confirm_patch_reruns_each_failing_cell_with_the_patch() -> None:
    s = spec(confirm_patch="ddtestbed-custom-mask")

    def answer(c: PlannedCell) -> CellResult:
        if c.patch and c.config.budget == 16:
            return res(c, "ok")  # the patch fixes the mask, not the other modes
        return seed(c)

    p, rounds = simulate(s, answer)
    conf = [c for r in rounds for c in r if c.purpose == "confirm"]
    assert sorted(c.config.budget for c in conf) == [16, 32, 64]
    assert conf[0].key.endswith("+patch[ddtestbed-custom-mask]")
    vs = build_verdicts(p)
    got = {tuple(v.budgets): v.patch_confirmed for v in vs if v.kind != "ok"
           and v.decided_by != "cured cell"}  # b64's second defect: no patch of its own
    assert got == {(16,): True, (32,): False, (64,): False}
    # a mode left unfixed: still "failure found"; the fixed one says so, not "verify a fix"
    assert exit_code(vs) == 1
    fixed = next(v for v in vs if v.patch_confirmed)
    assert fixed.next_step.startswith("ddtestbed-custom-mask fixes it: b16 passes with it")
    assert "verify a fix" not in fixed.next_step and "patch status" in fixed.next_command


def test_a_patch_that_fixes_every_failure_mode_has_its_own_exit_code() -> None:
    s = replace(spec(confirm_patch="ddtestbed-custom-mask"), budgets=(8, 16))

    def answer(c: PlannedCell) -> CellResult:
        return res(c, "ok") if c.patch else seed(c)

    p, _ = simulate(s, answer)
    vs = build_verdicts(p)
    assert [(v.kind, v.patch_confirmed) for v in vs if v.kind != "ok"] == [
        ("buffer_sizing", True)]
    assert exit_code(vs) == int(ExitCode.FIXED) == 14
    assert exit_code(vs, protocol="bisect") == 1  # the commit without the patch is bad


def test_workspace_overrun_at_a_quarter_of_max_bs_is_escalated_to_bs_1_never_capture() -> None:
    # the issue-23 case: a workspace of 4 MiB, 70000 bytes a row; at max bs 64 every budget
    # overruns it and a quarter (16) still does; bs 1 cures b8..b32, never b64 (65 rows)
    s = spec()

    def answer(c: PlannedCell) -> CellResult:
        bs = c.config.max_bs or 64
        if c.config.graph and bs * (c.config.budget + 1) * 70000 > 4 * 1024 * 1024:
            return res(c, "crash", CUBLAS)
        return res(c, "ok")

    p, rounds = simulate(s, answer)
    vs = build_verdicts(p)
    assert not [v for v in vs if v.kind == "graph_capture"]
    ws = next(v for v in vs if v.kind == "buffer_sizing")
    assert ws.budgets == [8, 16, 32] and ws.decided_by == "max-bs experiment"
    assert ws.advice is not None and ws.advice.max_bs == 1
    inc = next(v for v in vs if 64 in v.budgets)
    assert inc.kind == "inconclusive" and inc.reason == "graph-undecided"
    assert any("max bs 1 fails the same way" in e.summary for e in inc.evidence)
    assert "--confirm-patch" in inc.next_command
    bs = sorted({c.config.max_bs for r in rounds for c in r if c.purpose == "max_bs"})
    assert bs == [1, 16]


def test_a_second_defect_diagnosed_at_one_budget_serves_a_later_cured_one() -> None:
    """The mask too small from b16 (x4 cures b16, only x16 cures b64) and a kernel defect from
    b16 (garbage in eager too). b16's cured cell is garbage and its eager control fails the
    same way: kernel. b64's own diagnosis (its x4 control still crashed) cures at x16 and the
    cured cell is garbage like b16's: expected b16's diagnosis applied ("fails like b16"),
    with no eager cell of b64's own."""
    def world(c: PlannedCell) -> CellResult:
        b, g = c.config.budget, c.config.graph
        if b == 8:
            return res(c, "ok")
        if not g:
            return res(c, "garbage", GARBAGE)
        cured = "cuda_graph_custom_mask" in c.buffers and (b < 64 or (c.factor or 4) >= 16)
        return res(c, "garbage", GARBAGE) if cured else res(c, "crash", ILLEGAL)

    p, rounds = simulate(spec(), world)
    vs = build_verdicts(p)
    k64 = [v for v in vs if 64 in v.budgets and v.kind == "kernel"]
    assert len(k64) == 1 and k64[0].decided_by == "cured cell", [
        (v.budgets, v.kind, v.decided_by) for v in vs]
    assert any("fails like b16" in e.summary for e in k64[0].evidence)
    k16 = next(v for v in vs if v.budgets == [16] and v.kind == "kernel")
    assert k16.decided_by == "eager control"
    eager = sorted(c.config.budget for r in rounds for c in r if not c.config.graph)
    assert 64 not in eager and 16 in eager


def test_an_oversize_that_did_not_cure_is_not_narrowed_down() -> None:
    """Seen on the real H200 (docs/gpu-results.md, 2026-12-02 second plant run): with two
    suspects, b15's garbage survived both enlarged together, and the planner then enlarged
    the first alone (a restart that cannot cure what the pair did not) and called the
    graph_capture verdict "oversize bisection, medium". A failed enlargement decides it
    as the oversize experiment, with high confidence, and names no buffer."""
    other = Suspect("positions", "srt/model_executor/cuda_graph_runner.py", 191,
                    "(max_bs * 16,)", "DecodeInputBuffers.create", ("fixed-size-growing-use",), 1)
    s = spec(suspects=(MASK, other))
    p, rounds = simulate(s, threshold(s, 32, "capture"))
    ov = [c.buffers for r in rounds for c in r if c.purpose == "oversize"]
    assert ov and all(set(b) == {MASK.attr, other.attr} for b in ov), ov
    v = next(v for v in build_verdicts(p) if v.budgets[0] == 32)
    assert v.kind == "graph_capture" and v.decided_by == "oversize experiment"
    assert v.confidence == "high" and not v.buffer
