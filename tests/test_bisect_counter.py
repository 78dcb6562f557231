"""The bisect's "configs left" counter (git bisect's "N revisions left"): it never rises, it
reaches 0 exactly when the plan is done, and it is a true upper bound: at every step the cells
the run still takes are at most what it shows. Plans: the seed (three modes), one threshold of
each kind at each position, nothing failing, a flaky cell, repeats, three suspects to name,
four parallel hosts. Expected for every plan, written before running: non-increasing, >= the
cells that really follow, 0 at the end."""
from __future__ import annotations

import itertools

import pytest
from planner_util import MASK, seed

from ddprobe.bisect.agreement import AgreementOptions
from ddprobe.bisect.planner import BisectSpec, Planner, PlanOptions, bound
from ddprobe.bisect.static import Suspect
from ddprobe.bisect.synthetic import KINDS, threshold
from ddprobe.bisect.worstcase import Countdown
from ddprobe.results import CellResult, Config, Outcome

BUDGETS = (8, 16, 32, 64)
OTHER = [Suspect(a, "srt/x.py", 10, "(max_bs,)", "X.init_cuda_graph_state", (), 1)
         for a in ("kv_indptr", "qo_indptr")]


def _spec(budgets=BUDGETS, suspects=(MASK,), **opts) -> BisectSpec:
    return BisectSpec(tuple(budgets), Config(8, max_bs=64), small_max_bs=16,
                      suspects=tuple(suspects), options=PlanOptions(**opts))


def _drive(spec: BisectSpec, oracle, k: int = 1) -> tuple[list[int], list[int]]:
    """(counter before each round, cells actually run from that point on)."""
    p = Planner(spec)
    shown: list[int] = []
    ran: list[int] = []
    for _ in range(100):
        cells = p.next_cells(k)
        shown.append(p.remaining()[0])
        if not cells:
            break
        ran.append(len(cells))
        for c in cells:
            p.record(c, oracle(c))
    after = [sum(ran[i:]) for i in range(len(shown))]
    return shown, after


def _check(shown: list[int], after: list[int], k: int = 1) -> None:
    assert shown[-1] == 0 and after[-1] == 0
    assert all(a >= b for a, b in zip(shown, shown[1:], strict=False)), f"counter rose: {shown}"
    if k == 1:  # speculative cells of parallel hosts are extra work beyond the worst case
        assert all(s >= a for s, a in zip(shown, after, strict=False)), \
            f"counter below truth: {shown} {after}"
    assert shown[0] > 0


def test_seed_counter_never_rises_and_bounds_the_rest() -> None:
    shown, after = _drive(_spec(), seed)
    _check(shown, after)
    # the report: 4, 6, 8, 7, 9, 6, 5, 3 (it rose three times)
    assert len(set(shown)) == len(shown)  # it also moves every round


@pytest.mark.parametrize("kind,at", list(itertools.product(KINDS, (None, 8, 16, 32, 64))))
def test_one_threshold_plans(kind: str, at: int | None) -> None:
    s = _spec()
    _check(*_drive(s, threshold(s, at, kind)))


def test_three_suspects_naming_and_six_budgets() -> None:
    s = _spec(budgets=(4, 8, 16, 32, 64, 128), suspects=(OTHER[0], MASK, OTHER[1]))
    _check(*_drive(s, threshold(s, 32, "buffer", culprit="cuda_graph_custom_mask")))


def test_repeats_and_a_flaky_cell() -> None:
    s = _spec(repeat=2)
    n = {"count": 0}

    def flaky(c):
        r = seed(c)
        if c.config.key == "b32-graph":  # disagreeing repeats: outside the adversary's alphabet
            n["count"] += 1
            if n["count"] == 2:
                return CellResult("h", c.config, Outcome.OK, timings={"restart": 1.0})
        return r
    shown, after = _drive(s, flaky)
    assert shown[-1] == 0 and all(a >= b for a, b in zip(shown, shown[1:], strict=False))


def test_confirm_patch_and_infrastructure_skips() -> None:
    s = _spec(confirm_patch="fix.patch")

    def skips(c):
        if c.purpose == "eager":
            return CellResult("h", c.config, Outcome.ERROR, error="ssh dropped")
        return seed(c)
    shown, _ = _drive(s, skips)
    assert shown[-1] == 0 and all(a >= b for a, b in zip(shown, shown[1:], strict=False))


def test_four_hosts_counter_never_rises() -> None:
    shown, after = _drive(_spec(), seed, k=4)
    _check(shown, after, k=4)


def test_the_search_free_bound_is_an_upper_bound_of_the_exact_count() -> None:
    p = Planner(_spec())
    first = bound(p)
    # 4 budgets x (frontier + O, O2, E, M, M2 + what a cure leaves (3) + a control of its
    # own): the exact search's fallback; with the graph-vs-eager comparison, + an eager cell
    # per budget and one divergence mode (its eager repeat and a diagnosis: 1 + 8)
    assert first == 40 + 4 + 1 + 8
    off = Planner(_spec(agreement=AgreementOptions(enabled=False)))
    assert bound(off) == 40
    assert p.remaining()[0] <= first


def test_countdown_clamps_an_answer_outside_the_worst_case() -> None:
    c = Countdown()
    assert c.show(9) == 9
    c.ran()
    assert c.show(12) == 8  # a flaky repeat made the plan longer: the counter does not rise
    assert c.show(5) == 5
