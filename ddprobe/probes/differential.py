"""Graph-vs-eager differential: the same prompts' greedy outputs, token by token (pure).

With temperature 0 the target's output must not depend on CUDA graphs. A graph cell whose
answers differ from the eager cell's at the same budget is `garbage` even when its acceptance
length and coding tests pass (TensorRT-LLM #17110: GSM8K 96.17 -> 88.21 with graphs, acceptance
1.318 vs 1.319). What is compared, per task both cells answered:

* the `/generate` continuation's `output_ids` (token ids, when the server returns them: SGLang
  and the testbed do), token by token: the first diverging token index;
* the chat answer's text: the first diverging character (the chat API returns no ids).

Numerics can differ legitimately: SGLang documents that greedy output is deterministic only with
`--enable-deterministic-inference` ("Deterministic Inference" in SGLang's docs), since kernels
split reductions differently by batch shape, and a graph pads the batch to a captured size.
Which backends have the mode depends on the release (0.5.4-0.5.11: flashinfer, fa3, triton;
0.5.21 on: six; none before 0.5.4): the caller passes what the host's own source says
(`ddprobe.sources.determinism`, `backends`). So the verdict says which case it is:
deterministic inference on (a divergence is a defect), off on a backend that has the mode (a
divergence is most likely a defect: say how to make it decisive), or a backend without one
(the divergence is reported, the cell is not failed: it cannot discriminate).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # results is imported where a cell is changed (this module stays pure)
    from ddprobe.results import CellResult

DETERMINISTIC_FLAG: Final = "--enable-deterministic-inference"
TEXT_CAP: Final = 2000  # characters of each answer kept in the evidence
WINDOW: Final = 40  # characters shown around the first difference

SAME, DIVERGED, NOT_DECISIVE, INCOMPARABLE = "same", "diverged", "not_decisive", "incomparable"


def escape(s: str) -> str:
    """Host text made inert for a terminal, a log and a report: control and non-ASCII
    characters as Python escapes (newline as \\n), nothing else changed."""
    return s.encode("unicode_escape", "backslashreplace").decode("ascii")


def bounded(s: str, cap: int = TEXT_CAP) -> str:
    e = escape(s)
    return e if len(e) <= cap else e[:cap] + f"... ({len(s):,} chars)"


def first_diff(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return None if len(a) == len(b) else n


@dataclass(frozen=True)
class Divergence:
    task: str
    token: int | None  # first differing /generate output token (None: ids equal or absent)
    char: int | None  # first differing character of the chat answer (None: equal)
    graph: str  # the graph cell's chat answer, escaped and bounded
    eager: str
    graph_at: str = ""  # the texts around the first difference, escaped
    eager_at: str = ""
    graph_ids: tuple[int, ...] = ()  # the /generate tokens around the first differing one
    eager_ids: tuple[int, ...] = ()

    @property
    def where(self) -> str:
        parts = []
        if self.token is not None:
            parts.append(f"token {self.token} of /generate")
        if self.char is not None:
            parts.append(f"char {self.char} of the chat answer")
        return " and ".join(parts) or "?"

    def line(self) -> str:
        s = f"{self.task} at {self.where}"
        if self.char is not None:
            s += f": graph '{self.graph_at}' vs eager '{self.eager_at}'"
        elif self.token is not None:
            s += f": graph ids {list(self.graph_ids)} vs eager ids {list(self.eager_ids)}"
        return s


@dataclass(frozen=True)
class Differential:
    status: str  # same | diverged | not_decisive | incomparable
    compared: int  # tasks both cells answered
    diverged: tuple[Divergence, ...] = ()
    determinism: str = ""  # what is known about the backend's determinism, one line
    note: str = ""  # why incomparable / not decisive
    graph_cell: str = ""
    eager_cell: str = ""
    tokens_compared: int = 0  # /generate token ids compared in all

    @property
    def summary(self) -> str:
        if self.status == INCOMPARABLE:
            return f"graph vs eager: not compared ({self.note})"
        if self.status == SAME:
            return (f"graph vs eager: greedy answers identical in all {self.compared} tasks"
                    + (f" ({self.tokens_compared} /generate tokens compared id by id)"
                       if self.tokens_compared else ""))
        first = self.diverged[0]
        head = (f"graph vs eager: {len(self.diverged)}/{self.compared} greedy answers differ; "
                f"first: {first.line()}")
        return head + (f"; {self.note}" if self.note else "")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["summary"] = self.summary
        return d


@dataclass(frozen=True)
class Side:
    """One cell's answers: chat texts, /generate ids, and what it really ran."""

    key: str
    texts: Mapping[str, str] = field(default_factory=dict)
    ids: Mapping[str, Sequence[int]] = field(default_factory=dict)
    graph: bool | None = None  # CUDA graphs, as the server reported (None: unknown)
    backend: str | None = None
    argv: Sequence[str] = ()


def _dict(v: Any) -> dict[Any, Any]:
    return v if isinstance(v, dict) else {}


def side_of(cell: CellResult) -> Side:
    """A `CellResult` kept with `keep_answers` as one side of the differential."""
    eff = getattr(cell, "effective", None)
    graph = eff.cuda_graph if eff is not None and eff.cuda_graph is not None else None
    backend = (eff.attention_backend if eff is not None else None) or cell.config.backend
    texts = _dict(cell.answers)
    ids = _dict(cell.answer_ids)
    return Side(cell.config.key, {str(k): str(v) for k, v in texts.items()},
                {str(k): [int(x) for x in v if isinstance(x, int)] for k, v in ids.items()
                 if isinstance(v, list)},
                graph, backend, tuple(cell.launch or ()))


def determinism(graph: Side, eager: Side, backends: Sequence[str] | None = None
                ) -> tuple[bool | None, str]:
    """(decisive?, what is known): True when deterministic inference is on for both; None
    when the backend has the mode but it is off (or the host's list was not read); False when
    the host's SGLang (`backends`: its deterministic backends, None: not read) has none for
    the backend."""
    on = all(DETERMINISTIC_FLAG in s.argv for s in (graph, eager))
    backend = graph.backend or eager.backend
    if on:
        return True, f"{DETERMINISTIC_FLAG} is on: greedy output must not depend on graphs"
    if backend and backends is not None and backend not in backends:
        have = ", ".join(backends) or "none"
        return False, (f"attention backend {backend} has no deterministic mode in this SGLang "
                       f"(its {DETERMINISTIC_FLAG} backends: {have}): graph and eager may "
                       "differ by floating-point reduction order alone")
    b = backend or "the default backend (assumed to have one)"
    return None, (f"{DETERMINISTIC_FLAG} is off ({b}): greedy output can still differ by "
                  f"reduction order; re-run with --extra '{DETERMINISTIC_FLAG}' to make the "
                  "comparison decisive")


def _not_comparable(graph: Side, eager: Side) -> str | None:
    """Why the two cells cannot be compared, or None."""
    if graph.graph is False:
        return f"{graph.key} did not run CUDA graphs (the server reported cuda graph off)"
    if eager.graph is True:
        return f"{eager.key} ran CUDA graphs (the server reported cuda graph on)"
    if not set(graph.texts) & set(eager.texts):
        return ("the cells have no answered task in common (answers not kept, or every "
                "request failed)")
    return None


def _divergence(t: str, graph: Side, eager: Side) -> tuple[Divergence | None, int]:
    """Task `t`'s first difference (None: the same), and the /generate tokens compared."""
    a, b = graph.texts[t], eager.texts[t]
    ga, gb = list(graph.ids.get(t, ())), list(eager.ids.get(t, ()))
    both = bool(ga and gb)
    tok = first_diff(ga, gb) if both else None
    ntok = min(len(ga), len(gb)) if both else 0
    ch = first_diff(a, b)
    if tok is None and ch is None:
        return None, ntok
    lo = max(0, (ch or 0) - WINDOW // 2)
    at = (escape(a[lo:lo + WINDOW]), escape(b[lo:lo + WINDOW])) if ch is not None else ("", "")
    tl = max(0, (tok or 0) - 3)
    ids = (tuple(ga[tl:tl + 6]), tuple(gb[tl:tl + 6])) if tok is not None else ((), ())
    return Divergence(t, tok, ch, bounded(a), bounded(b), at[0], at[1], *ids), ntok


def _order(d: Divergence) -> tuple[int, int, str]:
    return (d.token if d.token is not None else 1 << 30,
            d.char if d.char is not None else 1 << 30, d.task)


def compare(graph: Side, eager: Side, *, backends: Sequence[str] | None = None) -> Differential:
    why_not = _not_comparable(graph, eager)
    if why_not is not None:
        return Differential(INCOMPARABLE, 0, note=why_not, graph_cell=graph.key,
                            eager_cell=eager.key)
    tasks = sorted(set(graph.texts) & set(eager.texts))
    out: list[Divergence] = []
    ntok = 0
    for t in tasks:
        div, n = _divergence(t, graph, eager)
        ntok += n
        if div is not None:
            out.append(div)
    out.sort(key=_order)
    decisive, known = determinism(graph, eager, backends)
    if not out:
        status, note = SAME, ""
    elif decisive is False:
        status, note = NOT_DECISIVE, "not counted as garbage: " + known
    else:
        status, note = DIVERGED, "" if decisive else known
    return Differential(status, len(tasks), tuple(out), known, note=note, graph_cell=graph.key,
                        eager_cell=eager.key, tokens_compared=ntok)


def apply(graph_cell: CellResult, eager_cell: CellResult, *,
          backends: Sequence[str] | None = None) -> Differential:
    """Compare two kept cells and, on a decisive divergence, make the graph cell `garbage`
    (signature `garbage: graph-eager divergence`), in place. Returns the comparison."""
    d = compare(side_of(graph_cell), side_of(eager_cell), backends=backends)
    eager_cell.differential = {"graph_cell": d.graph_cell, "status": d.status,
                               "summary": d.summary}
    mark_garbage(graph_cell, d)
    return d


def mark_garbage(graph_cell: CellResult, d: Differential) -> None:
    """Record the comparison on the graph cell and, on a decisive divergence, make it
    `garbage` (signature `garbage: graph-eager divergence`), in place."""
    from ddprobe.results import SIGNATURE_LINE_CAP, Outcome, Signature
    from ddprobe.untrusted import first_chars
    graph_cell.differential = d.to_dict()
    if d.status == DIVERGED and graph_cell.outcome in (Outcome.OK, Outcome.DEGRADED):
        graph_cell.outcome = Outcome.GARBAGE
        first = d.diverged[0]
        graph_cell.signature = Signature("garbage", "graph-eager divergence",
                                         first_chars(d.summary, SIGNATURE_LINE_CAP))
        graph_cell.notes.append(
            f"the greedy output with CUDA graphs differs from eager at {first.where} of "
            f"{first.task} although acceptance and coding passed")


def evidence(graph_cell: CellResult | None, eager_cell: CellResult | None
             ) -> Differential | None:
    """The comparison of a failing graph cell with its eager control, for a verdict's
    evidence (nothing is changed); None when either kept no answers."""
    if graph_cell is None or eager_cell is None:
        return None
    if not graph_cell.answers or not eager_cell.answers:
        return None
    d = compare(side_of(graph_cell), side_of(eager_cell))
    return None if d.status == INCOMPARABLE else d


def pairs(cells: Sequence[CellResult]) -> list[tuple[CellResult, CellResult]]:
    """(graph cell, eager cell) pairs of one config but for CUDA graphs, both with answers."""
    by: dict[tuple[Any, ...], dict[bool, Any]] = {}
    for c in cells:
        if getattr(c, "kind", "cell") != "cell" or c.patches or not c.answers:
            continue
        k = c.config
        sig = (getattr(c, "host", ""), k.budget, k.max_bs, k.backend, tuple(k.extra_args))
        by.setdefault(sig, {}).setdefault(bool(k.graph), c)
    return [(v[True], v[False]) for v in by.values() if True in v and False in v]


@cache
def _suite_tasks() -> int:
    """The bundled coding suite's task count, read once (ok verdicts are rebuilt per cell)."""
    from ddprobe.probes.coding import load_suite
    return len(load_suite("coding").tasks)


def batch_coverage(graph: CellResult | None) -> tuple[str, dict[str, int]] | None:
    """Which captured graphs a comparison replayed: no batch held more requests than the
    probe had in flight (its own count), so the graphs captured for larger batches never ran
    and a corruption only they carry is not seen. None: not known (an older journal) or
    every captured size covered."""
    if graph is None or graph.probes is None or graph.probes.peak_requests is None:
        return None
    peak = graph.probes.peak_requests
    top = graph.effective.max_captured_bs if graph.effective is not None else None
    if top is None or peak >= top:
        return None
    tasks = min(-(-top // 2), _suite_tasks())  # each probe task sends two requests
    return (f"at most {peak} requests in flight: the graphs captured for batches of more "
            f"than {peak} (up to {top}) were not replayed in the comparison (`--tasks all "
            f"--concurrency {tasks}`: up to {2 * tasks} requests)",
            {"peak_requests": peak, "max_captured_bs": top})


__all__ = ["DIVERGED", "Differential", "Divergence", "INCOMPARABLE", "NOT_DECISIVE", "SAME",
           "Side", "apply", "batch_coverage", "bounded", "compare", "escape", "evidence",
           "mark_garbage", "pairs", "side_of"]
