"""A pass is not a pass until graph output equals eager (bisect/agreement.py), on the planner
with answers as the cells give them (task -> text, /generate ids).

Expected, written before running:
* stale scalar from b16 (graph text differs from eager at b16+, coding passes): b64 passes,
  its eager comparison differs -> b64 fails; the search goes down (b16 differs, b8 identical);
  at b16 the eager cell is repeated (identical: stable), the mask x4 and x16 do not make the
  output equal -> graph_capture for 16 and 64 (32 assumed), advice kind `diverged` keeping b8;
  the ok verdict (b8) carries the comparison; 9 cells.
* nondeterministic eager (each eager run answers differently): b16's eager repeat differs
  from the first -> inconclusive (reason nondeterministic), never graph_capture, and the next
  command runs the comparison with --enable-deterministic-inference.
* --no-compare: no eager cell at a passing budget, and the ok says it was not compared.
"""
from __future__ import annotations

from collections.abc import Callable
from itertools import count

from planner_util import spec

from ddprobe.bisect.agreement import AgreementOptions
from ddprobe.bisect.cells import PlannedCell
from ddprobe.bisect.planner import simulate
from ddprobe.bisect.plantext import plan_lines
from ddprobe.bisect.verdicts import build_verdicts
from ddprobe.results import CellResult, Outcome
from ddprobe.sources.determinism import FLAG, Determinism

GOOD_TEXT = "def f(x):\n    return x + 1\n"
STALE_TEXT = "def f(x):\n    return  x + 1\n"  # one space became two: coding still passes


def _cell(c: PlannedCell, text: str) -> CellResult:
    ids = [ord(ch) for ch in text]
    return CellResult("h", c.config, Outcome.OK, timings={"restart": 1.0},
                      answers={"t1": text}, answer_ids={"t1": ids})


def stale_from(b0: int, eager: Callable[[PlannedCell], str] | None = None
               ) -> Callable[[PlannedCell], CellResult]:
    def answer(c: PlannedCell) -> CellResult:
        if not c.config.graph:
            return _cell(c, eager(c) if eager else GOOD_TEXT)
        return _cell(c, STALE_TEXT if c.config.budget >= b0 else GOOD_TEXT)
    return answer


def test_a_silent_divergence_fails_its_budgets_and_is_graph_capture() -> None:
    p, rounds = simulate(spec(compare=True), stale_from(16))
    keys = [c.key for r in rounds for c in r]
    assert keys[:6] == ["b64-graph-bs64", "b64-eager-bs64", "b16-graph-bs64", "b16-eager-bs64",
                        "b8-graph-bs64", "b8-eager-bs64"]
    assert "b16-eager-bs64+again" in keys and len(keys) == 9
    vs = {tuple(v.budgets): v for v in build_verdicts(p)}
    ok = vs[(8,)]
    assert ok.kind == "ok" and ok.confidence == "high"
    diff = [e for e in ok.evidence if e.kind == "differential"]
    assert diff and "identical" in diff[0].summary and diff[0].details["differential"]["status"] \
        == "same"
    gc = vs[(16, 64)]
    assert gc.kind == "graph_capture" and gc.signature == "garbage: graph-eager divergence"
    assert gc.advice is not None and (gc.advice.kind, gc.advice.keep) == ("diverged", 8)
    assert any(e.kind == "differential" and "differ" in e.summary for e in gc.evidence)
    assert any("eager is stable" in e.summary for e in gc.evidence)
    assert vs[(32,)].kind == "graph_capture" and not vs[(32,)].tested
    # no budget whose graph output differs from eager is called ok
    assert not [v for v in build_verdicts(p) if v.kind == "ok" and set(v.budgets) & {16, 32, 64}]


def test_nondeterministic_eager_is_inconclusive_never_graph_capture() -> None:
    n = count()
    p, rounds = simulate(spec(compare=True), stale_from(8, lambda c: GOOD_TEXT + "#" * next(n)))
    vs = build_verdicts(p)
    assert not [v for v in vs if v.kind in ("graph_capture", "ok")]
    inc = next(v for v in vs if v.tested)
    assert inc.kind == "inconclusive" and inc.reason == "nondeterministic"
    assert inc.advice is not None and inc.advice.kind == "nondeterministic"
    assert inc.advice.command is not None and \
        "--extra=--enable-deterministic-inference" in inc.advice.command.argv
    assert "not a verdict on CUDA graphs" in inc.next_step


def test_the_comparison_can_be_turned_off_and_the_ok_says_so() -> None:
    p, rounds = simulate(spec(compare=False), stale_from(16))
    assert not [c for r in rounds for c in r if not c.config.graph]
    ok = next(v for v in build_verdicts(p) if v.kind == "ok")
    assert ok.budgets == [64]  # wrong output, and the verdict says it did not look
    assert any("not compared with eager (--no-compare" in e.summary for e in ok.evidence)


def test_the_plan_shows_and_counts_the_comparison() -> None:
    on = "\n".join(plan_lines(spec(compare=True)))
    off = "\n".join(plan_lines(spec(compare=False)))
    assert "graph vs eager: the largest passing budget and the kept one" in on
    assert "graph vs eager not compared (--no-compare)" in off
    # every budget passes: the largest restarted, then its eager comparison
    assert "restarts: 2 if every budget passes" in on and "restarts: 1 if every" in off


def test_an_eager_cell_that_cannot_answer_leaves_the_ok_unconfirmed() -> None:
    def answer(c: PlannedCell) -> CellResult:
        if not c.config.graph:
            return CellResult("h", c.config, Outcome.ERROR, error="ssh dropped")
        return _cell(c, GOOD_TEXT)
    p, _ = simulate(spec(compare=True), answer)
    ok = next(v for v in build_verdicts(p) if v.kind == "ok")
    assert ok.confidence == "medium"
    assert any("not compared with eager: the eager cell skip" in e.summary for e in ok.evidence)


def test_agreement_options_default_on() -> None:
    assert AgreementOptions().enabled


# -- what the oversize factors proved (bisect/capacity.py) ------------------------------------

def test_a_mask_far_too_small_makes_the_passing_budget_latent_inferred() -> None:
    """Expected: b16 crashes (illegal address), the mask x4 still crashes, x16 cures it: the
    mask holds fewer than 17/4 = 4.25 draft tokens' rows and does not grow with the budget;
    b8 needs 9, so b8 passes only because the overrun is unseen: `buffer_sizing (latent,
    inferred)` with the arithmetic, no ok verdict, and no advice keeps b8."""
    from planner_util import ILLEGAL, res

    def answer(c: PlannedCell) -> CellResult:
        if c.config.budget == 8 or not c.config.graph:
            return res(c, "ok")
        if c.buffers and (c.factor or 4) >= 16:
            return res(c, "ok")
        return res(c, "crash", ILLEGAL)
    p, _ = simulate(spec(), answer)
    vs = build_verdicts(p)
    assert not [v for v in vs if v.kind == "ok"]
    lat = next(v for v in vs if v.inferred)
    assert lat.budgets == [8] and lat.label == "buffer_sizing (latent, inferred)"
    ev = lat.evidence[0]
    assert "17/4 = 4.25" in ev.summary and "9 >= 4.25" in ev.summary
    assert ev.details["capacity"]["holds_fewer_than"] == 4.25
    bs = next(v for v in vs if v.kind == "buffer_sizing" and not v.latent)
    assert bs.advice is not None and (bs.advice.keep, bs.advice.unsafe) == (None, 8)
    assert "none is safe" in bs.next_step


def test_an_unchecked_latent_write_is_never_advised_as_working() -> None:
    """Expected: the seed's b8 passes, the mask is flagged (fixed size, growing use) and the
    latent check cannot run: the ok says what would decide it, never 'work with CUDA graphs'."""
    from planner_util import seed

    from ddprobe.bisect.latent import LatentOptions
    p, _ = simulate(spec(latent=LatentOptions(enabled=True, available=False,
                                              note="no compute-sanitizer")), seed)
    ok = next(v for v in build_verdicts(p) if v.kind == "ok")
    assert ok.advice is not None and ok.advice.kind == "works_unchecked"
    assert "work with CUDA graphs" not in ok.next_step
    assert "possible and unchecked" in ok.next_step and "--sanitize" in ok.next_step


# ---- which side is wrong, with the host's deterministic mode (ddprobe.sources.determinism) ----
# Expected (written before running): where the host's SGLang has --enable-deterministic-
# inference for the cells' backend (0.5.11's list: flashinfer, fa3, triton), the divergence's
# second eager cell runs with that flag on that backend (not eager repeated): eager equal to it
# -> graph_capture, the evidence naming the flag; eager differing from it -> inconclusive
# (nondeterministic), decided by "deterministic eager". On torch_native (not on the list), or a
# release without the flag, eager is repeated as before. The plan says which, and why.

def _det(backend: str | None, *, flag: bool = True) -> AgreementOptions:
    d = Determinism(flag, ("flashinfer", "fa3", "triton") if flag else None,
                    "srt/server_args.py:164", "0.5.11")
    return AgreementOptions(deterministic=d, backend=backend)


def _det_spec(backend: str | None, *, flag: bool = True):  # -> BisectSpec
    return spec(compare=True, agreement=_det(backend, flag=flag))


def test_a_divergence_is_decided_by_eager_with_deterministic_inference() -> None:
    p, rounds = simulate(_det_spec("triton"), stale_from(16))
    det = [c for r in rounds for c in r if FLAG in c.config.extra_args]
    assert [c.key for c in det] == [det[0].key] and det[0].config.backend == "triton"
    assert not det[0].config.graph and not [c for r in rounds for c in r if c.purpose ==
                                           "compare"]  # no eager repeat
    gc = next(v for v in build_verdicts(p) if v.kind == "graph_capture" and v.tested)
    assert any(f"eager with {FLAG}: identical answers" in e.summary for e in gc.evidence)
    assert len([c for r in rounds for c in r]) == 9  # as many restarts as eager repeated


def test_eager_differing_from_deterministic_eager_is_inconclusive() -> None:
    def answer(c: PlannedCell) -> CellResult:
        if FLAG in c.config.extra_args:
            return _cell(c, GOOD_TEXT + "#")  # the batch-invariant order gives its own answer
        return stale_from(16)(c)
    p, _ = simulate(_det_spec("triton"), answer)
    vs = build_verdicts(p)
    assert not [v for v in vs if v.kind == "graph_capture"]
    inc = next(v for v in vs if v.kind == "inconclusive" and v.tested)
    assert inc.reason == "nondeterministic" and inc.decided_by == "deterministic eager"
    assert any(f"eager differs from eager with {FLAG} (attention backend triton)" in e.summary
               for e in inc.evidence)


def test_without_the_flag_for_the_backend_eager_is_repeated_and_the_plan_says_why() -> None:
    for opts in (_det("torch_native"), _det("triton", flag=False), _det(None)):
        p, rounds = simulate(spec(compare=True, agreement=opts), stale_from(16))
        assert not [c for r in rounds for c in r if FLAG in c.config.extra_args]
        assert [c for r in rounds for c in r if c.purpose == "compare"]
    plan = "\n".join(plan_lines(_det_spec("torch_native")))
    assert "the eager cell repeated (SGLang 0.5.11 supports --enable-deterministic-inference " \
           "on flashinfer, fa3, triton only (srt/server_args.py:164), not on torch_native)" in plan
    plan = "\n".join(plan_lines(_det_spec("triton")))
    assert f"eager with {FLAG} on triton (srt/server_args.py:164)" in plan
    old = "\n".join(plan_lines(_det_spec("triton", flag=False)))
    assert "has no --enable-deterministic-inference (added in 0.5.4)" in old
