"""The ground truth written in a scenario's header, read back for tests and benchmarks.

Each bundled scenario states, before it was ever run, what a bisect must answer:

    # expect: --budgets 8,16,32,64 --thorough => 8:ok 16:kernel 32:ok 64:ok
    # expect: --budgets 8,16,32,64 => 8:ok 16:ok 32:ok? 64:ok

`KIND|KIND` accepts either (e.g. `buffer_sizing|inconclusive` where no experiment ddprobe can
run decides it); `KIND+KIND` needs both (two defects at one budget: a verdict of each kind,
and no verdict of another kind); a trailing `?` means the budget is expected to be *assumed* (not restarted,
never high confidence). Nothing in ddprobe's logic reads this: only the tests and
`benchmarks/verdict_accuracy.py`.
"""
from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass

from .scenario import SCENARIO_DIR, bundled_scenarios, load_scenario

_LINE = re.compile(r"^#\s*expect:\s*(?P<flags>.*?)\s*=>\s*(?P<truth>.*)$")


@dataclass(frozen=True)
class Truth:
    kinds: tuple[str, ...]  # acceptable verdict kinds (of the first defect)
    assumed: bool = False  # expected not restarted (low confidence)
    also: tuple[tuple[str, ...], ...] = ()  # `+`: each further defect's acceptable kinds

    @property
    def groups(self) -> tuple[tuple[str, ...], ...]:
        return (self.kinds, *self.also)

    @property
    def text(self) -> str:
        return "+".join("|".join(g) for g in self.groups)


@dataclass(frozen=True)
class Expectation:
    scenario: str
    flags: tuple[str, ...]
    truth: dict[int, Truth]

    @property
    def budgets(self) -> tuple[int, ...]:
        return tuple(sorted(self.truth))

    @property
    def label(self) -> str:
        extra = [f for f in self.flags if not f.startswith("--budgets")]
        rest = " ".join(x for x in extra if not x[0].isdigit())
        return self.scenario + (f" {rest}" if rest else "")


def parse_header(name: str, text: str) -> list[Expectation]:
    out: list[Expectation] = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        m = _LINE.match(line.strip())
        if not m:
            continue
        truth: dict[int, Truth] = {}
        for item in m.group("truth").split():
            b, _, kinds = item.partition(":")
            assumed = kinds.endswith("?")
            groups = [tuple(g.split("|")) for g in kinds.rstrip("?").split("+")]
            truth[int(b)] = Truth(groups[0], assumed, tuple(groups[1:]))
        out.append(Expectation(name, tuple(shlex.split(m.group("flags"))), truth))
    return out


def expectations(names: list[str] | None = None) -> list[Expectation]:
    out: list[Expectation] = []
    for name in names or bundled_scenarios():
        out += parse_header(name, (SCENARIO_DIR / f"{name}.yaml").read_text(encoding="utf-8"))
    return out


@dataclass(frozen=True)
class Graded:
    budget: int
    expected: Truth
    kind: str  # the verdict's kind ("-" when no verdict covers the budget)
    confidence: str
    tested: bool
    grade: str  # right | wrong | inconclusive


def grade(exp: Expectation, verdicts: list) -> list[Graded]:  # list[Verdict]
    """Each budget's verdict against the header's truth. An `inconclusive` where the truth
    does not allow it is counted apart (not wrong, not right); an assumed budget is right only
    at low confidence. Each defect (two with `+`) needs a verdict of its kinds at the budget,
    and a verdict there of a kind no defect allows is wrong (a second defect invented)."""
    out: list[Graded] = []
    for b in exp.budgets:
        t = exp.truth[b]
        at = [v for v in verdicts if b in v.budgets]
        at.sort(key=lambda v: not v.tested)  # a tested verdict first
        if not at:
            out.append(Graded(b, t, "-", "-", False, "wrong"))
            continue
        picked = [next((v for v in at if v.kind in g), None) for g in t.groups]
        ok = all(v is not None and (v.tested or v.confidence == "low") for v in picked) and \
            all(any(v.kind in g for g in t.groups) for v in at)
        shown = [v for v in picked if v is not None] or at[:1]
        kind = "+".join(v.kind for v in shown)
        if not ok and len(at) > len(shown):
            kind = "+".join(v.kind for v in at)
        g = "right" if ok else "inconclusive" if any(v.kind == "inconclusive" for v in at) \
            else "wrong"
        out.append(Graded(b, t, kind, "/".join(v.confidence for v in shown),
                          all(v.tested for v in shown), g))
    return out


def minimum_restarts(exp: Expectation) -> int:
    """A lower bound on the restarts any bisect needs to collect the evidence ddprobe's rules
    require, derived from the truth alone.

    Frontier: with --thorough every budget; when nothing fails, the largest budget (the rest
    assumed); a pre-load failure, the largest and the smallest; otherwise the more of (a) the
    information bound of a binary search for the first failing budget, 1 + ceil(log2 n), and
    (b) one restart per run of one failure mode plus the last passing budget below the first,
    plus the largest budget where it fails inside a run (the search starts there, and it is
    not a run's first budget). A run is one kind from one defect: a silent divergence (the
    stale scalar) and a capture defect that strikes first at larger budgets are two runs of
    graph_capture, each with its own diagnosis (ddprobe diagnoses each failure mode apart,
    and restarts a budget between two modes whose diagnoses differ).
    Per run of one kind, at its first budget, the experiment that decides it when the answer is
    known: kernel 1 (eager control), buffer sizing 1 (one oversize at a curing factor, or the
    smaller max bs), graph capture 2 (eager control + one oversize at the escalated factor),
    anything else 2 (a config every budget refuses: 0). Every other restarted failing budget of a decided run: its own control
    (1); the largest budget counts as restarted.

    The graph-vs-eager comparison: one eager cell at the budget the advice keeps (the last
    passing one below the first failure; the largest when nothing fails); a silent divergence
    (the stale scalar: graph passes, output differs) is found by the eager cell at each of its
    restarted budgets, which is also its diagnosis's eager control, plus one eager repeat per
    such run; a nondeterministic server's row is searched with a graph and an eager cell per
    budget, plus one repeat."""
    b = exp.budgets
    kinds = {x: exp.truth[x].kinds[0] for x in b}
    if all(k == "config_error" for k in kinds.values()):
        return 0  # refused by the flags check / preflight: no restart at all
    fails = [x for x in b if kinds[x] != "ok"]
    sc = load_scenario(exp.scenario)
    runs: list[list[int]] = []
    for x in b:
        if kinds[x] == "ok":
            continue
        last = runs[-1][-1] if runs else None
        if last is not None and kinds[last] == kinds[x] and b.index(last) == b.index(x) - 1 \
                and _silent(sc, [last]) == _silent(sc, [x]):
            runs[-1].append(x)
        else:
            runs.append([x])
    thorough = "--thorough" in exp.flags
    if thorough:
        frontier = len(b)
    elif not fails:
        frontier = 1
    elif all(kinds[x] == "inconclusive" for x in fails) and len(fails) == len(b):
        frontier = min(2, len(b))
    else:
        ok_below = any(kinds[x] == "ok" for x in b if x < fails[0])
        info = 1 + math.ceil(math.log2(len(b))) if kinds[b[-1]] != "ok" else 1
        top = int(kinds[b[-1]] != "ok" and all(r[0] != b[-1] for r in runs))
        frontier = max(info, len(runs) + int(ok_below) + top)
    if sc.defects.nondeterministic.every and all(kinds[x] == "inconclusive" for x in b):
        # every comparison differs: the search for the first budget, a graph and an eager
        # cell each, then eager repeated once (it differs from itself)
        return 2 * (1 + math.ceil(math.log2(len(b)))) + 1
    n = frontier + _comparisons(b, kinds, fails)
    for run in runs:
        k = kinds[run[0]]
        n += {"kernel": 1, "buffer_sizing": 1, "graph_capture": 2}.get(k, 1 if k ==
                                                                        "inconclusive" else 2)
        if k == "inconclusive":
            continue
        if k == "graph_capture" and _silent(sc, run):
            n += 1  # a divergence: eager repeated once before the diagnosis counts
        if k == "buffer_sizing":
            n += _residual(sc, exp.truth[run[0]], run[0], [kinds[x] for x in b if x < run[0]])
        others = run[1:] if thorough else [x for x in run[1:] if x == b[-1]]
        n += len(others)
    return n


def _residual(sc: object, t: Truth, at: int, below: list[str]) -> int:
    """What a cure leaves, read at the run's first budget (the cure ran with real weights):
    a second defect that is a kernel, its eager control (1); a capture defect, nothing when a
    budget below already has one (it fails like it), else its eager control (1), or for a
    silent divergence (the stale scalar) the eager cell and its repeat (2); no second defect:
    the eager cell the cured output is compared with (1)."""
    second = t.also[0][0] if t.also else None
    if second == "graph_capture":
        if _silent(sc, [at]):
            return 2
        return 0 if "graph_capture" in below else 1
    return 1


def _comparisons(b: tuple[int, ...], kinds: dict[int, str], fails: list[int]) -> int:
    """Eager cells the comparison of the kept passing budget needs (0 or 1)."""
    oks = [x for x in b if kinds[x] == "ok"]
    if not oks:
        return 0
    if not fails:
        return 1
    return 1 if any(x < fails[0] for x in oks) else 0


def _silent(sc: object, run: list[int]) -> bool:
    """The run's graph cells pass but their output differs from eager (the stale scalar
    alone: no crash or garbage defect strikes there first)."""
    d = sc.defects  # type: ignore[attr-defined]
    st = d.stale_scalar.min_draft_tokens
    cap = d.graph_capture.max_wave_tokens
    return st is not None and all(x + 1 >= st and (cap is None or x + 1 <= cap) for x in run)
