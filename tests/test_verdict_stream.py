"""Each verdict is announced (and journaled) the moment it is final, and a final verdict is
the verdict the run ends with (pure: the planner on simulated results)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from planner_util import cheap_seed, seed, spec

from ddprobe.bisect.planner import Planner
from ddprobe.bisect.streaming import FINAL, VerdictStream, identity, journaled
from ddprobe.bisect.verdicts import build_verdicts


def run(p: Planner, oracle, stream: VerdictStream) -> list[str]:
    keys = []
    while cells := p.next_cells(1):
        for c in cells:
            p.record(c, oracle(c))
            keys.append(c.key)
            stream(c, oracle(c))
    return keys


def test_seed_verdicts_stream_in_the_order_they_are_decided(tmp_path: Path) -> None:
    # expected: every frontier cell first (b64, b16, b8, b32, cheap then real where needed);
    # then b8's ok (nothing left at b8 or able to bound the mask) with b32's graph capture
    # (its real eager control and oversize), then b16's and b64's once their cheap cures were
    # checked with real weights
    lines: list[dict] = []
    said = []
    p = Planner(spec(cheap=True))
    st = VerdictStream(p, host="h", append=lines.append,
                       announce=lambda v, when: said.append((v.budgets, v.kind, when)))
    keys = run(p, cheap_seed, st)
    # since a cheap cure is checked with the real weights for a second defect (b64's smaller
    # max bs shows b32's capture defect), b16's and b64's verdicts wait for those cells
    assert [(b, k) for b, k, _ in said] == [([8], "ok"), ([32], "graph_capture"),
                                            ([16], "buffer_sizing"), ([64], "buffer_sizing"),
                                            ([64], "graph_capture")]
    final = {identity(v): v.to_dict() for v in build_verdicts(p, host="h")}
    assert len(lines) == len(final) == 5
    for d in lines:  # each announced verdict is the one the run ends with, word for word
        assert d["type"] == FINAL
        body = {k: v for k, v in d.items() if k not in ("type", "final")}
        assert body == final[identity(d)]
    # b8's ok waits for the cells that could still bound the fixed mask's capacity: b16's
    # oversize x4 (it could fail and be escalated), b64's smaller max bs (failing, b64's
    # oversize x4 would run next), and b32's oversize, which starts at x16 (real weights:
    # garbage is no crash) and, curing, would have x4 run after it; x16 fails there, and
    # b32's verdict comes with the same cell
    first_after = said[0][2]["after_cells"]
    assert keys[first_after - 1] == "b32-graph-bs64+oversize[cuda_graph_custom_mask]x16"
    assert said[1][2]["after_cells"] == first_after
    assert keys.index("b64-graph-bs16+cheap") < first_after - 1
    assert said[-1][2]["after_cells"] == len(keys)
    j = tmp_path / "journal.jsonl"
    j.write_text("".join(json.dumps(d) + "\n" for d in lines[:2]))
    assert journaled(j) == {identity(d) for d in lines[:2]}


def test_a_resumed_run_does_not_announce_again() -> None:
    p = Planner(spec())
    first = VerdictStream(p, host="h", append=lambda d: None, announce=lambda v, w: None)
    run(p, seed, first)
    said = []
    again = VerdictStream(p, host="h", append=lambda d: None,
                          announce=lambda v, w: said.append(v), seen=first.seen)
    c = p.frontier_cell(8)
    again(c, seed(c))
    assert said == [] and len(first.seen) == 5


def matrix(code: str):
    """A matrix over 8,16,32,64, one letter a budget: o ok, i the mask crash (an oversize
    cures it), c the cuBLAS crash (a smaller max bs cures it), g garbage with graphs only, k
    garbage in eager too, d passes with graphs but answers unlike eager; dummy weights crash
    the same and give garbage otherwise."""
    from dataclasses import replace

    from planner_util import CUBLAS, GARBAGE, ILLEGAL, res
    kinds = dict(zip((8, 16, 32, 64), code, strict=True))

    def said(r, text="fib(10) = 55"):
        return replace(r, answers={"fibonacci": text}, answer_ids={"fibonacci": [
            ord(ch) for ch in text]})

    def real(c):
        k = kinds[c.config.budget]
        if k == "d":
            return said(res(c, "ok"), "fib(10) = 89" if c.config.graph else "fib(10) = 55")
        return said(_real(c, k)) if _real(c, k).outcome.value == "ok" else _real(c, k)

    def _real(c, k):
        if k == "o":
            return res(c, "ok")
        if k == "k":
            return res(c, "garbage", GARBAGE)
        if not c.config.graph:
            return res(c, "ok")
        if k == "i":
            return res(c, "ok") if "cuda_graph_custom_mask" in c.buffers \
                else res(c, "crash", ILLEGAL)
        if k == "c":
            return res(c, "ok") if c.config.max_bs == 16 else res(c, "crash", CUBLAS)
        return res(c, "garbage", GARBAGE)

    def answer(c):
        r = real(replace(c, cheap=False))
        if c.cheap and r.outcome.value != "crash":
            r = res(c, "garbage", GARBAGE)
        return replace(r, cheap=c.cheap or None)
    return answer


@pytest.mark.parametrize("code", ["ogok", "okog", "iiii", "oioi", "oiic", "icgc", "ococ",
                                  "ogdi", "oidc", "iidg"])
@pytest.mark.parametrize("cheap", [True, False])
def test_an_announced_verdict_is_the_one_the_run_ends_with(code: str, cheap: bool) -> None:
    # each of these announced a verdict that later changed under the first rule (no frontier
    # cell left, none at the verdict's budgets): a budget assumed between two failures of
    # one mode was restarted when their diagnoses disagreed (ogok: b32 then passed and joined
    # b8's ok), or the assumed budget's verdict took its mode's decision before the mode's
    # diagnosis ran (iiii: b32 `inconclusive`, then `buffer_sizing`); a comparison failed the
    # pass that the verdicts above it named (ogdi: b64's evidence said b32 passes)
    p = Planner(spec(cheap=cheap, compare=True))
    said: list = []
    oracle = matrix(code)
    run(p, oracle, VerdictStream(p, host="h", append=lambda d: None,
                                 announce=lambda v, w: said.append(v)))
    final = {identity(v): v.to_dict() for v in build_verdicts(p, host="h")}
    assert said
    for v in said:
        assert final.get(identity(v)) == v.to_dict(), (v.budgets, v.kind)
    assert {identity(v) for v in said} == set(final)


@pytest.mark.parametrize("crash", [True, False])
@pytest.mark.parametrize("cheap", [True, False])
def test_a_pass_waits_for_the_oversize_that_bounds_a_fixed_buffer(cheap: bool,
                                                                  crash: bool) -> None:
    # the mask-tiny matrix: b4 and b8 pass, b16 and b32 overflow a fixed mask that x4 does
    # not cure and x16 does; x4 failing at b16 bounds the mask below 17/4 rows, so b4 and b8
    # (5 and 9 rows) leave `ok` for a latent overflow. Under the old rule (only an escalated
    # oversize held `ok` back) both were announced `ok` before the first oversize ran. The
    # overrun as garbage (no crash): with cheap cells the real-weight oversize starts at x16,
    # and x16 curing then runs x4 too (it bounds the mask), so cheap cells on and off reach
    # the same verdicts (before, x4 never ran with cheap cells and b4, b8 stayed `ok`)
    from dataclasses import replace

    from planner_util import GARBAGE, ILLEGAL, res

    def real(c):
        if c.config.budget <= 8 or not c.config.graph or (
                "cuda_graph_custom_mask" in c.buffers and (c.factor or 4) >= 16):
            return res(c, "ok")
        return res(c, "crash", ILLEGAL) if crash else res(c, "garbage", GARBAGE)

    def answer(c):
        r = real(replace(c, cheap=False))
        if c.cheap and r.outcome.value != "crash":
            r = res(c, "garbage", GARBAGE)
        return replace(r, cheap=c.cheap or None)

    s = spec(cheap=cheap)
    p = Planner(replace(s, budgets=(4, 8, 16, 32), base=replace(s.base, budget=4)))
    said: list = []
    run(p, answer, VerdictStream(p, host="h", append=lambda d: None,
                                 announce=lambda v, w: said.append(v)))
    final = {identity(v): v.to_dict() for v in build_verdicts(p, host="h")}
    assert any(v["kind"] == "buffer_sizing" and v.get("latent") and v["budgets"] == [4, 8]
               for v in final.values())  # the matrix does reach the inference
    assert [(v.budgets, v.kind) for v in said if v.kind == "ok"] == []
    for v in said:
        assert final.get(identity(v)) == v.to_dict(), (v.budgets, v.kind)
    assert {identity(v) for v in said} == set(final)
