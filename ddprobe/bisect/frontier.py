"""The graph row: where failures start, and which budget to test next (pure).

Search rule, as in `git bisect`: first make sure there is a bad end (the largest budget,
which is tested first: if it passes, failures that grow with the budget cannot occur below it),
then bisect between the highest passing and the lowest failing budget. Every budget above the
frontier must be classified by failure mode; a budget between two failures of the same mode is
inferred to share it (it is not restarted), while between two different modes the boundary is
bisected too. With k hosts a round takes k probes, splitting the open gaps k-ary.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ddprobe.bisect.cells import BAD, GOOD, PENDING, SKIP, UNTESTED, UNTESTED_OBS, Obs


@dataclass(frozen=True)
class Gap:
    """Untested budgets (indices) between two anchors that must be searched."""

    lo: int  # anchor index below (-1: none)
    hi: int  # anchor index above (len: none)
    untested: tuple[int, ...]
    why: str  # frontier | boundary | recovery | top


@dataclass(frozen=True)
class Row:
    """The graph row's state: observations per budget and what the search still needs."""

    budgets: tuple[int, ...]
    obs: tuple[Obs, ...]
    gaps: tuple[Gap, ...]  # gaps that still need probes, in priority order
    inferred: Mapping[int, str] = field(default_factory=dict)  # index -> mode (sandwiched)
    assumed_good: tuple[int, ...] = ()  # untested indices below a passing budget

    @property
    def complete(self) -> bool:
        return not self.gaps and not any(o.status == PENDING for o in self.obs)

    @property
    def first_bad(self) -> int | None:
        for i, o in enumerate(self.obs):
            if o.status == BAD:
                return i
        return None

    @property
    def last_good_below_frontier(self) -> int | None:
        f = self.first_bad
        if f is None:
            return None
        goods = [i for i in range(f) if self.obs[i].status == GOOD]
        return goods[-1] if goods else None

    def unresolved_between(self) -> tuple[int, ...]:
        """Indices between the last good and the first bad that were never usable (skip, flaky,
        refused): the first failing budget is ambiguous among them and the first bad."""
        f = self.first_bad
        if f is None:
            return ()
        g = self.last_good_below_frontier
        lo = -1 if g is None else g
        return tuple(i for i in range(lo + 1, f) if not self.obs[i].usable)

    def mode_of(self, i: int) -> str | None:
        o = self.obs[i]
        if o.status == BAD:
            return o.mode
        return self.inferred.get(i)

    def modes(self) -> dict[str, list[int]]:
        """Failure mode -> indices (tested and inferred), modes in order of first budget."""
        out: dict[str, list[int]] = {}
        for i in range(len(self.budgets)):
            m = self.mode_of(i)
            if m is not None:
                out.setdefault(m, []).append(i)
        return out

    def settled_below(self, i: int) -> bool:
        """No search is still needed below index i (so a mode starting at i starts there)."""
        if any(self.obs[j].status == PENDING for j in range(i)):
            return False
        return not any(u < i for g in self.gaps for u in g.untested)


def _upper_mid(xs: Sequence[int]) -> int:
    return xs[len(xs) // 2]


def build_row(budgets: Sequence[int], obs: Mapping[int, Obs]) -> Row:
    """The row for `budgets` (sorted) given observations keyed by budget."""
    bs = tuple(budgets)
    os_ = tuple(obs.get(b, UNTESTED_OBS) for b in bs)
    n = len(bs)
    anchors = [i for i in range(n) if os_[i].usable]
    untested = [i for i in range(n) if os_[i].status == UNTESTED]
    gaps: list[Gap] = []
    inferred: dict[int, str] = {}
    assumed: list[int] = []
    top_anchor = anchors[-1] if anchors else -1
    above = [i for i in untested if i > top_anchor]
    if above:
        # no bad end yet: the largest untestable-so-far budget first (git bisect needs a bad end)
        gaps.append(Gap(top_anchor, n, tuple(above), "top"))
    bounds = [-1, *anchors]
    for lo, hi in zip(bounds, anchors, strict=False):
        between = tuple(i for i in untested if lo < i < hi)
        _span(os_, lo, hi, between, gaps, inferred, assumed)
    order = {"frontier": 0, "top": 1, "boundary": 2, "recovery": 3}
    gaps.sort(key=lambda g: (order[g.why], g.lo))
    return Row(bs, os_, tuple(gaps), inferred, tuple(assumed))


def _span(os_: Sequence[Obs], lo: int, hi: int, between: tuple[int, ...], gaps: list[Gap],
          inferred: dict[int, str], assumed: list[int]) -> None:
    """What the untested budgets `between` two anchors (lo -1: below the first) add: a gap to
    search, failures inferred (both ends fail the same way) or passes assumed."""
    lo_st = os_[lo].status if lo >= 0 else None
    hi_o = os_[hi]
    if hi_o.status == GOOD:
        if lo_st == BAD and between:
            gaps.append(Gap(lo, hi, between, "recovery"))
        else:
            assumed.extend(between)
        return
    # hi is bad
    if lo_st is None or lo_st == GOOD:
        if between:
            gaps.append(Gap(lo, hi, between, "frontier"))
    elif os_[lo].mode == hi_o.mode:
        for i in range(lo + 1, hi):
            if os_[i].status in (UNTESTED, SKIP):
                inferred[i] = hi_o.mode or ""
    elif between:
        gaps.append(Gap(lo, hi, between, "boundary"))


def probes(row: Row, k: int) -> tuple[list[int], list[int]]:
    """(needed, speculative) indices: one needed probe per open gap, then k-ary splits of the
    gaps (whichever way a probe goes, one of its halves is searched next) up to k in all."""
    needed: list[int] = []
    rest: list[tuple[int, ...]] = []
    for g in row.gaps:
        xs = g.untested
        m = xs[-1] if g.why == "top" else _upper_mid(xs)
        needed.append(m)
        pos = xs.index(m)
        rest.extend(p for p in (xs[:pos], xs[pos + 1:]) if p)
    spec: list[int] = []
    while len(needed) + len(spec) < k and rest:
        rest.sort(key=len, reverse=True)
        xs = rest.pop(0)
        m = _upper_mid(xs)
        spec.append(m)
        pos = xs.index(m)
        rest.extend(p for p in (xs[:pos], xs[pos + 1:]) if p)
    return needed, spec
