"""The latent-fault check (ddprobe/bisect/latent.py): planning, verdicts and their text, on
synthetic outcome tables whose sanitize cells carry REAL memcheck output (captured on an H200
running the testbed's CUDA mode at seed graph b16, tests/data) named by the real grep-buffers
analysis of the testbed's sources. Pure: no host, no server.

Expected answers, written before the runs (issue 12 and the H200 run of 2026-12-01):
  * H200 seed (8, 16 pass; 32 garbage; 64 cuBLAS): memcheck cells at b8 then b16 (cheapest
    first), after the graph row is complete; b8 clean -> `ok` "memcheck clean at b8";
    b16 -> `buffer_sizing (latent)` "passes, but writes past cuda_graph_custom_mask
    (srt/layers/attention/triton_backend.py:118): 474 invalid writes in
    write_tree_mask_kernel"; 32 and 64 unchanged; 6 + 2 restarts; exit 1.
  * invalid writes already at b8 -> b16 inferred latent, not restarted (1 memcheck cell).
  * no compute-sanitizer -> no memcheck cell; the `ok` says the check could not run, and why.
  * --no-latent-check -> no memcheck cell; the `ok` says the check is off.
  * nothing flagged and no memory fault -> no latent cell at all, no latent evidence.
  * no flagged buffer, but b32 crashes with an illegal address -> memcheck b8, b16.
  * invalid writes that name no flagged buffer -> `inconclusive (latent)`, not buffer_sizing.
  * a memcheck cell that errors (infrastructure) -> b8 stays `ok`, "could not run at b8".
"""
from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import pytest
from planner_util import BUDGETS, CUBLAS, GARBAGE, ILLEGAL, MASK
from sources_util import tb_buffer_report

from ddprobe.bisect.agreement import AgreementOptions
from ddprobe.bisect.cells import PlannedCell
from ddprobe.bisect.latent import LATENT_MODE, LatentOptions
from ddprobe.bisect.planner import BisectSpec, Planner, PlanOptions, simulate
from ddprobe.bisect.plantext import plan_lines
from ddprobe.bisect.static import Suspect
from ddprobe.bisect.verdicts import build_verdicts, exit_code
from ddprobe.cell.memcheck import parse_memcheck
from ddprobe.cell.sanitize import name_buffer
from ddprobe.report.terminal import what
from ddprobe.results import CellResult, Config, Outcome, Signature

DATA = Path(__file__).resolve().parent / "data"
ON = LatentOptions(enabled=True, available=True)


def spec(*, suspects: tuple[Suspect, ...] = (MASK,), latent: LatentOptions = ON) -> BisectSpec:
    # these matrices give no answers: the graph-vs-eager comparison is tested apart
    return BisectSpec(BUDGETS, Config(8, max_bs=64), small_max_bs=16, suspects=suspects,
                      options=PlanOptions(latent=latent,
                                          agreement=AgreementOptions(enabled=False)))


def res(c: PlannedCell, out: str, sig: Signature | None = None, **extra: object) -> CellResult:
    return CellResult("h", c.config, Outcome(out), signature=sig, timings={"restart": 1.0},
                      kind=c.kind, **extra)


def h200_memcheck_b16() -> dict:
    """The sanitize cell's extra for the captured H200 b16 run: parsed report + named buffer."""
    text = gzip.decompress((DATA / "testbed-h200-memcheck-b16-limit1000.txt.gz").read_bytes())
    san = parse_memcheck(text.decode())
    rep, params = tb_buffer_report()
    buf, how = name_buffer(san, rep, params, 16)
    return {"sanitizer": san.to_dict(), "buffer": buf, "buffer_match": how}


CLEAN = {"sanitizer": {"findings": [], "error_count": 0, "other_errors": [], "ran": True,
                       "clean": True}, "buffer": None,
         "buffer_match": "no out-of-bounds access reported"}
B16 = h200_memcheck_b16()


def h200(dirty: frozenset[int] = frozenset({16}), memcheck: dict | None = None):
    """The seed on the H200: 8 and 16 pass with graphs, 32 garbage, 64 cuBLAS at capture."""
    def answer(c: PlannedCell) -> CellResult:
        b, g = c.config.budget, c.config.graph
        if c.purpose == "sanitize":
            assert c.mode == LATENT_MODE and g
            if b in dirty:
                return res(c, "crash", Signature("sanitizer_oob", "Invalid __global__ write"),
                           **(memcheck or B16))
            return res(c, "ok", **CLEAN)
        if b <= 16 or not g:
            return res(c, "ok")
        if b == 32 or c.config.max_bs == 16:
            return res(c, "garbage", GARBAGE)
        return res(c, "crash", CUBLAS)
    return answer


def latent_cells(rounds: list[list[PlannedCell]]) -> list[str]:
    return [c.key for r in rounds for c in r if c.purpose == "sanitize"]


def test_h200_seed_memchecks_b8_then_b16_and_b16_is_latent_buffer_sizing() -> None:
    p, rounds = simulate(spec(), h200())
    keys = [c.key for r in rounds for c in r]
    assert latent_cells(rounds) == ["b8-graph-bs64+sanitize", "b16-graph-bs64+sanitize"]
    # the memcheck cells come once the graph row is complete (every budget classified)
    first_latent = keys.index("b8-graph-bs64+sanitize")
    assert {"b64-graph-bs64", "b16-graph-bs64", "b32-graph-bs64"} <= set(keys[:first_latent])
    # 7 restarts of the plain bisect (b32's oversize escalated x4 -> x16 before ruling buffer
    # sizing out) + 2 memcheck cells
    assert len(keys) == 9
    vs = build_verdicts(p)
    # the first verdict of each budget set (b64 also carries the cured cell's second one)
    got: dict = {}
    for v in vs:
        got.setdefault(tuple(v.budgets), v)
    ok, lat = got[(8,)], got[(16,)]
    assert ok.kind == "ok" and not ok.latent
    assert what(ok) == "passes with CUDA graphs; memcheck clean at b8"
    assert [v.label for v in vs][:2] == ["ok", "buffer_sizing (latent)"]  # in budget order
    assert lat.kind == "buffer_sizing" and lat.latent and lat.label == "buffer_sizing (latent)"
    assert what(lat) == ("passes, but writes past cuda_graph_custom_mask "
                         "(srt/layers/attention/triton_backend.py:118): 474 invalid writes in "
                         "write_tree_mask_kernel")
    assert lat.buffer is not None and lat.buffer["attr"] == "cuda_graph_custom_mask"
    assert lat.buffer["named_by"].startswith("memcheck (size with "
                                             "draft_model_config_num_draft_tokens = 9")
    assert lat.decided_by == "memcheck (latent check)" and lat.confidence == "high"
    mem = [e for e in lat.evidence if e.kind == "memcheck"]
    assert mem and mem[0].cells == ["b16-graph-bs64+sanitize"]
    assert mem[0].details["findings"]["error_count"] == 474
    # advice no longer points at the latent budget: the number is lowered, not the sentence
    assert ok.advice is not None and (ok.advice.keep, ok.advice.unsafe) == (8, 16)
    adv32 = got[(32,)].advice
    assert adv32 is not None and (adv32.kind, adv32.keep, adv32.unsafe) == \
        ("graph_capture", 8, 16)
    assert ok.next_step.startswith("budgets up to 8 (b16 passes but writes out of bounds)")
    assert "keep budget <= 8 (b16 passes but writes out of bounds)" in got[(32,)].next_step
    assert got[(32,)].kind == "graph_capture" and got[(64,)].kind == "buffer_sizing"
    assert not got[(64,)].latent
    assert exit_code(vs) == 1
    assert lat.to_dict()["label"] == "buffer_sizing (latent)"


def test_invalid_writes_at_the_smallest_budget_infer_the_larger_ones() -> None:
    p, rounds = simulate(spec(), h200(dirty=frozenset({8, 16})))
    assert latent_cells(rounds) == ["b8-graph-bs64+sanitize"]  # b16 inferred, not restarted
    vs = build_verdicts(p)
    assert not any(v.kind == "ok" for v in vs)
    (lat,) = [v for v in vs if v.latent]
    assert lat.budgets == [8, 16]
    assert any("b16 inferred" in e.summary for e in lat.evidence)


def test_without_compute_sanitizer_the_ok_says_the_check_could_not_run() -> None:
    off = LatentOptions(enabled=True, available=False, note="no compute-sanitizer on h")
    p, rounds = simulate(spec(latent=off), h200())
    assert latent_cells(rounds) == [] and sum(map(len, rounds)) == 7
    (ok,) = [v for v in build_verdicts(p) if v.kind == "ok" and v.tested]
    assert ok.budgets == [16] and ok.confidence == "medium"  # b8 is assumed, not restarted
    assert what(ok) == ("passes with CUDA graphs; latent check could not run "
                        "(no compute-sanitizer on h)")
    (ev,) = [e for e in ok.evidence if e.kind == "latent"]
    assert "does not grow with the budget" in ev.summary


def test_no_latent_check_turns_it_off_and_says_so() -> None:
    p, rounds = simulate(spec(latent=LatentOptions(enabled=False, note="--no-latent-check")),
                         h200())
    assert latent_cells(rounds) == []
    (ok,) = [v for v in build_verdicts(p) if v.kind == "ok" and v.tested]
    assert what(ok) == "passes with CUDA graphs; latent check off (--no-latent-check)"


def test_nothing_flagged_and_no_memory_fault_plans_no_latent_cell() -> None:
    p, rounds = simulate(spec(suspects=()), h200())
    assert latent_cells(rounds) == []
    for ok in [v for v in build_verdicts(p) if v.kind == "ok"]:
        assert not [e for e in ok.evidence if e.kind == "latent"]


def test_a_memory_fault_above_triggers_it_without_a_flagged_buffer() -> None:
    def answer(c: PlannedCell) -> CellResult:
        if c.purpose == "sanitize":
            return res(c, "ok", **CLEAN)
        if c.config.budget >= 32 and c.config.graph:
            return res(c, "crash", ILLEGAL)
        return res(c, "ok")
    p, rounds = simulate(spec(suspects=()), answer)
    assert latent_cells(rounds) == ["b8-graph-bs64+sanitize", "b16-graph-bs64+sanitize"]
    (ok,) = [v for v in build_verdicts(p) if v.kind == "ok"]
    assert what(ok) == "passes with CUDA graphs; memcheck clean at b8, b16"
    assert ok.budgets == [8, 16]


def test_invalid_writes_that_name_no_flagged_buffer_are_inconclusive() -> None:
    foreign = dict(B16, buffer={"attr": "qo_indptr", "file": "x.py", "line": 1},
                   buffer_match="exact size")
    p, _ = simulate(spec(), h200(memcheck=foreign))
    vs = build_verdicts(p)
    (lat,) = [v for v in vs if v.latent]
    assert lat.kind == "inconclusive" and lat.budgets == [16] and lat.label == \
        "inconclusive (latent)"
    assert "474 invalid accesses (474 writes) in write_tree_mask_kernel" in what(lat)
    assert "names qo_indptr, not a flagged buffer" in what(lat)
    assert exit_code(vs) == 1


def test_a_memcheck_cell_that_could_not_run_leaves_ok_and_says_why() -> None:
    base = h200()

    def answer(c: PlannedCell) -> CellResult:
        if c.purpose == "sanitize" and c.config.budget == 8:
            r = res(c, "error")
            r.error = "compute-sanitizer not found on h"
            return r
        return base(c)
    p, rounds = simulate(spec(), answer)
    assert latent_cells(rounds) == ["b8-graph-bs64+sanitize", "b16-graph-bs64+sanitize"]
    vs = build_verdicts(p)
    (ok,) = [v for v in vs if v.kind == "ok"]
    # b8's memcheck did not run, so b8 was never restarted: assumed ok, low
    assert ok.budgets == [8] and ok.confidence == "low" and not ok.tested
    assert "latent check could not run at b8" in what(ok)
    assert [v.budgets for v in vs if v.latent] == [[16]]


def test_plan_text_and_remaining_count_the_latent_cells() -> None:
    lines = plan_lines(spec())
    text = "\n".join(lines)
    assert ("latent check: the passing graph budgets at and above b8 (grep-buffers: "
            "cuda_graph_custom_mask (srt/layers/attention/triton_backend.py:118) does not grow "
            "with the budget while its use does)") in text
    assert "at most 4 memcheck cell(s), one restart each" in text
    p = Planner(spec())
    oracle = h200()
    while True:
        cells = p.next_cells(1)
        if not cells:
            break
        p.record(cells[0], oracle(cells[0]))
    assert p.remaining() == (0, 0)


def test_unavailable_plan_line_says_why() -> None:
    off = LatentOptions(enabled=True, available=False, note="no compute-sanitizer on h")
    text = "\n".join(plan_lines(spec(latent=off)))
    assert "(no compute-sanitizer on h)" in text and "memcheck cell(s)" not in text
    text = "\n".join(plan_lines(replace(spec(), options=PlanOptions(
        latent=LatentOptions(enabled=False, note="--no-latent-check")))))
    assert "latent check off (--no-latent-check)" in text


# -- end to end on the CPU testbed, with a compute-sanitizer stand-in on the host's PATH ------

@pytest.mark.parametrize("cheap", [False, True])
def test_bisect_on_the_cpu_testbed_memchecks_the_passing_budget(tmp_path: Path,
                                                               cheap: bool) -> None:
    """Expected (CPU seed: b16 crashes with an illegal address, so only b8 passes): one
    memcheck cell at b8 after the graph row, clean (the stand-in runs the server and prints
    memcheck's banner and a clean summary), so `ok` b8 "memcheck clean at b8"; the restart
    count includes that cell and b8's graph-vs-eager comparison (one eager cell: identical
    output, the seed's b8 is fine)."""
    import stat

    from sanitize_util import STAND_IN, sanitize_host
    from testbed_util import install_prefix

    from ddprobe.bisect.run import BisectRequest, run_bisect
    from ddprobe.remote import RemoteOptions
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "compute-sanitizer"
    exe.write_text(STAND_IN)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    host = sanitize_host(install_prefix(tmp_path / "site"), tmp_path, bindir)
    rep = run_bisect([host], BisectRequest(budgets=BUDGETS, tasks=("2",), cheap_cells=cheap),
                     root=tmp_path / "runs", opts=RemoteOptions())  # a local host
    keys = [c.plan["key"] for g in rep.groups for c in g.cells if c.plan]
    if cheap:
        # cheap cells: the memcheck cell too runs first with dummy weights; clean there proves
        # nothing, so the real one runs, and the verdicts are today's
        assert [k for k in keys if "+sanitize" in k] == ["b8-graph+sanitize+cheap",
                                                         "b8-graph+sanitize"], keys
        got = {tuple(v.budgets): v for v in rep.verdicts}
        assert what(got[(8,)]) == ("passes with CUDA graphs; vs eager at <= 4 requests "
                                   "(graphs up to 64 not compared); memcheck clean at b8")
        assert got[(16,)].kind == "buffer_sizing" and got[(32,)].kind == "graph_capture"
        return
    assert [k for k in keys if k.endswith("+sanitize")] == ["b8-graph+sanitize"], keys
    assert keys[-1] == "b8-graph+sanitize" or keys.index("b8-graph+sanitize") > keys.index(
        "b32-graph")
    got = {tuple(v.budgets): v for v in rep.verdicts}
    assert what(got[(8,)]) == ("passes with CUDA graphs; vs eager at <= 4 requests (graphs up "
                               "to 64 not compared); memcheck clean at b8")
    assert got[(16,)].kind == "buffer_sizing" and not got[(16,)].latent
    # compared with eager, but only at batches of up to 4 requests (2 tasks) of the 64
    # captured: not high (tests/test_stale_batch.py)
    assert "b8-eager" in keys and got[(8,)].confidence == "medium"
    assert got[(8,)].advice is not None and got[(8,)].advice.compared_requests == 4
    # b32's oversize escalated x4 -> x16; b16's cured cell compared with eager (b16-eager)
    assert "b16-eager" in keys
    assert rep.restarts_used == len(keys) == 12


# -- the H200 run of 2026-12-01 over a real sshd (docs/gpu-results.md): its raw sanitize logs --

def _cell_from_log(budget: int, text: str, outcome: str) -> CellResult:
    """A latent-check cell as the sanitize cell builds it, from the captured raw log."""
    san = parse_memcheck(text)
    rep, params = tb_buffer_report(budget)
    extra: dict = {"sanitizer": san.to_dict(), "buffer": None,
                   "buffer_match": "no out-of-bounds access reported"}
    if san.findings:
        extra["buffer"], extra["buffer_match"] = name_buffer(san, rep, params, budget)
    c = PlannedCell(Config(budget, graph=True), "sanitize", LATENT_MODE)
    return res(c, outcome, **extra)


def test_the_h200_ssh_run_logs_give_its_verdicts() -> None:
    """The two latent-check cells of the H200 bisect (seed, CUDA testbed, over sshd): b8's log
    has memcheck's banner, one answered request and no finding (stopped: no summary); b16's
    has 474 invalid 1-byte writes in write_tree_mask_kernel, some just past the 18,879,552 B
    mask. The verdicts: b8 "memcheck clean", b16 buffer_sizing (latent) naming the mask."""
    from ddprobe.bisect.cells import observe
    from ddprobe.bisect.latent import CLEAN as OK_STATUS
    from ddprobe.bisect.latent import DIRTY, judge
    b8 = _cell_from_log(8, (DATA / "testbed-h200-ssh-latent-b8-sanitize.log").read_text(), "ok")
    text = gzip.decompress((DATA / "testbed-h200-ssh-latent-b16-sanitize.log.gz").read_bytes())
    b16 = _cell_from_log(16, text.decode(), "crash")
    san = b16.sanitizer
    assert san["ran"] and san["error_count"] == 474
    assert {f["kernel"] for f in san["findings"]} == {"write_tree_mask_kernel"}
    assert 18_879_552 in {f["allocation_size"] for f in san["findings"]}
    j8 = judge(PlannedCell(b8.config, "sanitize", LATENT_MODE), observe([b8]), (MASK,))
    assert j8.status == OK_STATUS and j8.text.startswith("b8: memcheck clean")
    assert "no ERROR SUMMARY, since the server was stopped" in j8.text
    j16 = judge(PlannedCell(b16.config, "sanitize", LATENT_MODE), observe([b16]), (MASK,))
    assert j16.status == DIRTY
    assert j16.text == ("passes, but writes past cuda_graph_custom_mask "
                        "(srt/layers/attention/triton_backend.py:118): 474 invalid writes in "
                        "write_tree_mask_kernel")
