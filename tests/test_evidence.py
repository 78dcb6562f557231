"""Evidence discipline of the bisect (issue 10 item 2), on synthetic outcome tables (pure).

Each test states the ground truth of its case first, then asserts the verdict ddprobe gives.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from ddprobe.bisect.agreement import AgreementOptions
from ddprobe.bisect.cells import PlannedCell
from ddprobe.bisect.ladder import escalation, needed_factor
from ddprobe.bisect.planner import BisectSpec, PlanOptions, simulate
from ddprobe.bisect.static import Suspect
from ddprobe.bisect.verdicts import build_verdicts, exit_code
from ddprobe.results import CellResult, Config, Outcome, Signature

MASK = Suspect("cuda_graph_custom_mask", "srt/layers/attention/triton_backend.py", 118,
               "(max_num_tokens * self.max_context_len,)",
               "TritonAttnBackend.init_cuda_graph_state",
               ("fixed-size-growing-use",), 1)
SEQ_LENS = Suspect("seq_lens", "srt/model_executor/cuda_graph_runner.py", 85, "(self.max_bs,)",
                   "CudaGraphRunner.__init__", (), 2,
                   sizes=tuple({"budget": b, "draft_tokens": b + 1, "elements": 64, "bytes": 256,
                                "demand_elements": None, "short_by": None, "missing": []}
                               for b in (8, 16, 32, 64)))
ILLEGAL = Signature("cuda_illegal_address", "CUDA error: an illegal memory access was encountered")
CUBLAS = Signature("cublas", "[capture] CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmEx")
GARBAGE = Signature("garbage", "accept_length=1.01 coding 0/5")
EAGER_CRASH = Signature("traceback", "IndexError: index 17 is out of bounds (in eager_mask.py:40)")
IMPORT = Signature("traceback", "ModuleNotFoundError: No module named 'numpy'")
HANG = Signature("hang", "not healthy before the deadline (startup)")


def spec(budgets: tuple[int, ...] = (8, 16, 32, 64), *, suspects: tuple[Suspect, ...] = (MASK,),
         max_bs: int = 64, **opts: object) -> BisectSpec:
    # these matrices give no answers: the graph-vs-eager comparison is tested apart
    opts.setdefault("agreement", AgreementOptions(enabled=False))
    return BisectSpec(budgets, Config(budgets[0], max_bs=max_bs), small_max_bs=max(1, max_bs // 4),
                      suspects=suspects, options=PlanOptions(**opts))  # type: ignore[arg-type]


def res(c: PlannedCell, out: str, sig: Signature | None = None, **extra: object) -> CellResult:
    e = {"model_loaded": True, **extra}
    typed = {k: v for k, v in e.items() if k in CellResult.__dataclass_fields__}
    return CellResult("h", c.config, Outcome(out), signature=sig, timings={"restart": 1.0},
                      **typed, extra={k: v for k, v in e.items() if k not in typed})


def per_budget(vs: list) -> dict[int, tuple[str, str, bool]]:
    return {b: (v.kind, v.confidence, v.tested) for v in vs for b in v.budgets}


def keys(rounds: list) -> list[str]:
    return [c.key for r in rounds for c in r]


# -- the max-bs experiment takes its value from what the server ran ---------------------------

def test_max_bs_experiment_uses_the_captured_bs_not_the_inventory() -> None:
    """Truth: inventory says max bs 64 but the server captured [1..16] (a host override); a
    cuBLAS workspace overflows at b64 with bs 16 and is fine at bs <= 8: buffer_sizing, and the
    experiment must try 4 (16 // 4), never 16 (the failing config again)."""
    s = spec()

    def answer(c: PlannedCell) -> CellResult:
        bs = min(c.config.max_bs or 16, 16)
        cap = [x for x in (1, 2, 4, 8, 12, 16) if x <= bs]
        if c.config.budget < 64 or not c.config.graph or bs <= 8:
            return res(c, "ok", captured_bs=cap)
        return res(c, "crash", CUBLAS, captured_bs=cap)

    p, rounds = simulate(s, answer)
    assert "b64-graph-bs16" not in keys(rounds)
    v = next(v for v in build_verdicts(p) if v.kind != "ok")
    assert v.kind == "buffer_sizing" and v.decided_by == "max-bs experiment"
    assert v.advice is not None and v.advice.kind == "workspace" and v.advice.max_bs == 4
    assert v.advice.command is not None and v.advice.command.argv[-2:] == ["--max-bs", "4"]
    assert "--cuda-graph-max-bs 4" in v.next_step and "--max-bs 4" in v.next_command


def test_max_bs_experiment_that_ran_the_failing_max_bs_is_no_evidence() -> None:
    """Truth: the server ignores --cuda-graph-max-bs (captures [1..16] whatever is asked) and
    b64 fails in graph capture (stale buffers: eager fine, oversize no help). The max-bs cell
    ran the failing config again: it must not decide anything; graph_capture from O and E."""
    s = spec()

    def answer(c: PlannedCell) -> CellResult:
        cap = [1, 2, 4, 8, 12, 16]
        if c.config.budget < 64 or not c.config.graph:
            return res(c, "ok", captured_bs=cap)
        return res(c, "crash", CUBLAS, captured_bs=cap)

    p, _ = simulate(s, answer)
    v = next(v for v in build_verdicts(p) if v.kind != "ok")
    # a capacity error with no smaller max bs really run: a workspace is not ruled out
    assert v.kind == "inconclusive"
    mb = [e.summary for e in v.evidence if e.kind == "max_bs"]
    assert not mb or "no evidence" in mb[0]


def test_server_capturing_only_bs_1_has_no_max_bs_experiment() -> None:
    s = spec()

    def answer(c: PlannedCell) -> CellResult:
        if c.config.budget < 64 or not c.config.graph:
            return res(c, "ok", captured_bs=[1])
        return res(c, "crash", CUBLAS, captured_bs=[1])

    p, rounds = simulate(s, answer)
    assert not [c for r in rounds for c in r if c.purpose == "max_bs"]
    v = next(v for v in build_verdicts(p) if v.kind != "ok")
    assert any("no smaller max bs" in e.summary for e in v.evidence)


# -- a suspect that does not vary with the budget cannot rule buffer sizing out --------------

def test_fixed_size_suspect_cannot_rule_out_buffer_sizing() -> None:
    """Truth: an unknown buffer overflows at b32 (eager fine); grep-buffers found only a
    256-byte seq_lens, the same at every budget. Enlarging it proves nothing: inconclusive."""
    s = spec(suspects=(SEQ_LENS,))

    def answer(c: PlannedCell) -> CellResult:
        if c.config.budget < 32 or not c.config.graph:
            return res(c, "ok")
        return res(c, "crash", ILLEGAL)

    p, _ = simulate(s, answer)
    vs = [v for v in build_verdicts(p) if v.kind != "ok"]
    assert {v.kind for v in vs} == {"inconclusive"}
    v = vs[0]
    assert v.reason == "graph-undecided" and "same at every budget" in " ".join(
        e.summary for e in v.evidence)
    assert "--oversize-factor" in v.next_command and v.would_decide
    assert exit_code(vs) == 6


# -- oversize escalation -----------------------------------------------------------------------

def test_oversize_escalates_to_cover_the_static_shortfall() -> None:
    """Truth: the mask is 8x too small at b16 (demand/elements = 7.5 from grep-buffers); x4
    would still crash, x8 cures: the oversize starts at x8 (the static estimate), and the
    verdict is buffer_sizing, never 'fixed-capacity workspace'."""
    sized = replace(MASK, sizes=({"budget": 16, "elements": 1000, "demand_elements": 7500},))
    assert needed_factor([sized], 16) == 8 and escalation([sized], 16, 4) == 8
    assert escalation([MASK], 16, 4) == 16 and escalation([MASK], 16, 16) is None
    s = spec((8, 16), suspects=(sized,))

    def answer(c: PlannedCell) -> CellResult:
        if c.config.budget < 16 or not c.config.graph or (c.buffers and (c.factor or 4) >= 8):
            return res(c, "ok")
        return res(c, "crash", ILLEGAL)

    p, rounds = simulate(s, answer)
    v = next(v for v in build_verdicts(p) if v.kind != "ok")
    assert v.kind == "buffer_sizing" and v.buffer["attr"] == "cuda_graph_custom_mask"
    assert "b16-graph-bs64+oversize[cuda_graph_custom_mask]x8" in keys(rounds)
    assert "b16-graph-bs64+oversize[cuda_graph_custom_mask]" not in keys(rounds)  # no x4
    assert any("x8" in e.summary and "passes" in e.summary for e in v.evidence)


# -- each failing budget its own control ---------------------------------------------------------

def test_kernel_at_b48_is_not_hidden_by_b32_graph_capture_garbage() -> None:
    """Truth: b32+ graph garbage (stale buffers); from b48 the kernel is wrong too (eager
    garbage). Same garbage signature at b32, b48, b64. Expected: b8,b16 ok; b32 graph_capture;
    b48 and b64 kernel."""
    s = spec((8, 16, 32, 48, 64))

    def answer(c: PlannedCell) -> CellResult:
        b = c.config.budget
        if b >= 48:
            return res(c, "garbage", GARBAGE)
        if b >= 32 and c.config.graph:
            return res(c, "garbage", GARBAGE)
        return res(c, "ok")

    p, rounds = simulate(s, answer)
    got = per_budget(build_verdicts(p))
    assert got[32][0] == "graph_capture"
    assert got[48][0] == "kernel" and got[64][0] == "kernel"
    assert got[48][2] and got[64][2]  # both restarted, each with its own eager control
    assert {"b48-eager-bs64", "b64-eager-bs64"} <= set(keys(rounds))


def test_an_uncontrolled_budget_says_whose_evidence_it_rests_on() -> None:
    """Truth: a kernel defect from b16 (eager garbage too); b64's own eager control is lost
    to an SSH drop. b64 stays kernel, but says it rests on b16 and is not high."""
    def answer(c: PlannedCell) -> CellResult:
        if c.config.budget == 64 and not c.config.graph:
            return CellResult("h", c.config, Outcome.ERROR, error="ssh: connection lost")
        if c.config.budget >= 16:
            return res(c, "garbage", GARBAGE)
        return res(c, "ok")

    p, _ = simulate(spec(), answer)
    v = next(v for v in build_verdicts(p) if v.tested and 64 in v.budgets)
    assert v.kind == "kernel" and v.confidence == "medium"
    assert any("rests on b16's evidence" in e.summary for e in v.evidence)


# -- a control failing differently is not proof; the order does not matter ---------------------

@pytest.mark.parametrize("order", ["auto", "eager-first", "graph-first"])
def test_eager_only_bug_does_not_make_a_graph_mask_crash_kernel(order: str) -> None:
    """Truth: b16+ with graphs crash on an undersized mask (oversize cures); b16+ eager crash
    on an unrelated eager-only bug (another signature). buffer_sizing in every order."""
    s = spec(order=order)

    def answer(c: PlannedCell) -> CellResult:
        if c.config.budget < 16:
            return res(c, "ok")
        if not c.config.graph:
            return res(c, "crash", EAGER_CRASH)
        if "cuda_graph_custom_mask" in c.buffers:
            return res(c, "ok")
        return res(c, "crash", ILLEGAL)

    p, _ = simulate(s, answer)
    got = per_budget([v for v in build_verdicts(p) if v.tested])
    assert got[16][0] == "buffer_sizing" and got[64][0] == "buffer_sizing"


def test_eager_failing_differently_with_no_graph_cure_is_inconclusive() -> None:
    s = spec(order="eager-first")

    def answer(c: PlannedCell) -> CellResult:
        if c.config.budget < 64:
            return res(c, "ok")
        return res(c, "crash", EAGER_CRASH if not c.config.graph else ILLEGAL)

    p, _ = simulate(s, answer)
    v = next(v for v in build_verdicts(p) if v.kind != "ok")
    assert v.kind == "inconclusive" and v.reason == "eager-differs"
    assert "--no-graph" in v.next_command


# -- failures before the model is loaded ---------------------------------------------------------

@pytest.mark.parametrize("out,sig", [("crash", IMPORT), ("hang", HANG)])
def test_failure_before_model_load_in_every_config_is_inconclusive(out: str,
                                                                    sig: Signature) -> None:
    """Truth: the install cannot start (numpy missing / a hang while loading weights) in every
    config. Expected: inconclusive (reason preload) over every budget, never kernel; three
    restarts (top, smallest, its eager control); git bisect: skip (125)."""
    s = spec()
    p, rounds = simulate(s, lambda c: res(c, out, sig, model_loaded=False))
    vs = build_verdicts(p)
    assert not [v for v in vs if v.kind in ("kernel", "graph_capture", "buffer_sizing")]
    tested = [v for v in vs if v.tested]
    assert [v.kind for v in tested] == ["inconclusive"] and tested[0].reason == "preload"
    assert "before the model is loaded" in " ".join(e.summary for e in tested[0].evidence)
    assert "server logs" in tested[0].next_command
    assert len(keys(rounds)) == 3
    assert exit_code(vs, protocol="bisect") == 125 and exit_code(vs) == 6


# -- budgets not restarted -----------------------------------------------------------------------

def test_hang_at_one_budget_is_assumed_ok_without_thorough_and_found_with_it() -> None:
    """Truth: b32 hangs (graph and eager), every other budget works."""
    def answer(c: PlannedCell) -> CellResult:
        if c.config.budget == 32:
            return res(c, "hang", Signature("hang", "not healthy before the deadline (serving)"))
        return res(c, "ok")

    p, _ = simulate(spec(), answer)
    got = per_budget(build_verdicts(p))
    assert got[32] == ("ok", "low", False)  # assumed, never high
    p, _ = simulate(spec(thorough=True), answer)
    got = per_budget(build_verdicts(p))
    assert got[32][0] == "kernel" and got[32][2]
    assert got[64] == ("ok", "high", True) and got[8] == ("ok", "high", True)


# -- inconclusive is a first-class verdict in every renderer -------------------------------------

def test_inconclusive_reaches_every_renderer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A pre-load failure run written through the run store, rendered in every format: each
    shows the inconclusive verdict, what would decide it and the exact next command."""
    import csv
    import io
    import json

    from rich.console import Console

    from ddprobe.report import render
    from ddprobe.report.terminal import render_terminal
    from ddprobe.runmodel import build_model
    from ddprobe.store import RunStore, load_run

    s = spec()
    store = RunStore.create("bisect", tmp_path / "runs")
    store.append({"type": "run", "run_id": store.run_id, "command": "bisect", "hosts": ["h"],
                  "budgets": list(s.budgets), "started_at": "now", "options": {}})
    p, rounds = simulate(s, lambda c: res(c, "crash", IMPORT, model_loaded=False))
    for c in (c for r in rounds for c in r):
        store.cell(p.obs(c).first)  # type: ignore[arg-type]
    for v in build_verdicts(p, host="h"):
        store.verdict(v)
    store.append({"type": "end", "status": "skip", "exit_code": 6})
    rec = load_run(store.dir)
    cmd = next(v.next_command for v in rec.verdicts if v.kind == "inconclusive" and v.tested)
    assert cmd.startswith("ddprobe server logs --host h")
    md, html = render(build_model(rec), "md"), render(build_model(rec), "html")
    assert cmd in md and "What would decide it" in md
    assert "what would decide it" in html and "ddprobe server logs --host h" in html
    doc = json.loads(render(build_model(rec), "json"))
    assert any(v.get("next_command") == cmd and v.get("would_decide")
               for v in doc["verdicts"])
    rows = list(csv.DictReader(io.StringIO(render(build_model(rec), "csv"))))
    assert {r["verdict"] for r in rows} == {"inconclusive"}
    assert any(r["next_command"] == cmd for r in rows)
    con = Console(record=True, width=200)
    render_terminal(build_model(rec), con)
    text = con.export_text()
    assert "would decide it" in text and "server logs" in text
