"""A pass is not a pass until graph output equals eager (pure: no I/O).

A graph cell whose coding tests and acceptance pass can still be silently wrong: a stale
scalar captured into the graph flips a few greedy tokens (TensorRT-LLM #17110). So the budgets
a verdict calls ok and advises keeping are compared with an eager cell at the same budget,
token by token (`ddprobe.probes.differential`):

* which budgets (`targets`): the largest passing graph budget and the one the advice keeps
  (the last passing below the first failing one), restarted ones only; when one diverges it
  fails, the frontier search goes on, and the new ones are compared in turn;
* a divergence (`judge_graph`) makes the graph cell fail as `garbage: graph-eager divergence`
  (a copy: the journal keeps what the server did), so it is a failure mode like any other and
  its diagnosis (ladder.py) runs at its first budget, where the eager cell is its control;
* which side is wrong (`gate`): before that diagnosis counts, eager runs once more there:
  with `--enable-deterministic-inference` where the host's SGLang has it for the cells'
  backend (`deterministic`, read from its source: ddprobe.sources.determinism), else the
  eager cell repeated. Eager disagreeing with it is nondeterminism (`inconclusive`, never
  graph_capture); a backend without a deterministic mode cannot make a divergence decisive
  (`inconclusive`); with a stored baseline (`--baseline`), eager differing from it is said too.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from ddprobe.bisect.cells import BAD, GOOD, SKIP, Obs, PlannedCell
from ddprobe.bisect.frontier import Row
from ddprobe.bisect.ladder import Decision, LadderState
from ddprobe.probes import differential
from ddprobe.results import (
    SIGNATURE_LINE_CAP,
    CellResult,
    Config,
    EvidenceDetails,
    Outcome,
    Signature,
)
from ddprobe.sources.determinism import FLAG, NONE, Determinism
from ddprobe.untrusted import first_chars

COMPARE_MODE: Final = "compare"  # the mode of the comparison's eager cells
DIVERGENCE: Final = "graph-eager divergence"  # the Signature.key of a diverged graph cell


@dataclass(frozen=True)
class AgreementOptions:
    enabled: bool = True  # --no-compare turns it off
    # why it is off, as the plan and the ok verdict say it
    off_reason: str = "--no-compare"
    baseline: Mapping[str, str] | None = field(default=None, compare=False)  # task -> text
    baseline_key: str = ""  # the baseline cell's config key
    # the host's deterministic mode (its source) and the backend the cells run
    deterministic: Determinism = field(default=NONE, compare=False)
    backend: str | None = None

    @property
    def backends(self) -> tuple[str, ...] | None:
        """The host's deterministic backends (None: not read)."""
        return self.deterministic.backends

    @property
    def decides_deterministically(self) -> bool:
        """Does 'which side is wrong' run eager with --enable-deterministic-inference?"""
        return self.deterministic.supports(self.backend)


def eager_cell(base: Config, budget: int) -> PlannedCell:
    return PlannedCell(replace(base, budget=budget, graph=False), "eager", COMPARE_MODE)


def repeat_cell(cfg: Config) -> PlannedCell:
    """The eager cell again (a separate experiment: its answers are compared with the
    first's)."""
    return PlannedCell(replace(cfg, graph=False), "compare", COMPARE_MODE)


def side_cell(cfg: Config, opts: AgreementOptions) -> PlannedCell:
    """The cell that says which side of a divergence is wrong: eager with deterministic
    inference (on the cells' backend, named) where the host has it, else eager repeated."""
    if not opts.decides_deterministically:
        return repeat_cell(cfg)
    return PlannedCell(replace(cfg, graph=False, backend=opts.backend,
                               extra_args=(*cfg.extra_args, FLAG)), "eager", COMPARE_MODE)


def is_divergence(mode: str | None) -> bool:
    return bool(mode) and DIVERGENCE in str(mode)


def judged(cell: PlannedCell, opts: AgreementOptions) -> bool:
    """Is the cell's pass judged by its output against eager's at its budget?"""
    if not opts.enabled or cell.cheap or not cell.config.graph:
        return False
    return cell.purpose == "frontier" or (cell.purpose in ("oversize", "max_bs") and
                                          is_divergence(cell.mode))


def compare(graph: CellResult | None, eager: CellResult | None,
            opts: AgreementOptions | None = None) -> differential.Differential:
    if graph is None or eager is None:
        return differential.Differential(differential.INCOMPARABLE, 0, note="a cell did not run")
    return differential.compare(differential.side_of(graph), differential.side_of(eager),
                                backends=opts.backends if opts is not None else None)


def compare_eager(a: CellResult, b: CellResult) -> differential.Differential:
    """Two eager runs of one config, compared as the differential compares graph with eager."""
    sa, sb = differential.side_of(a), differential.side_of(b)
    d = differential.compare(replace(sa, graph=None), replace(sb, graph=None))
    if d.status == differential.NOT_DECISIVE:  # two eager runs: any difference is decisive
        d = replace(d, status=differential.DIVERGED)
    return d


def _diverged(d: differential.Differential) -> bool:
    return d.status in (differential.DIVERGED, differential.NOT_DECISIVE)


def judge_graph(raw: Obs, eager: Obs, *, strict: bool = False,
                opts: AgreementOptions | None = None) -> Obs:
    """The graph cell's observation once compared with eager: a divergence fails it.
    `strict` (an experiment on a divergence): output that cannot be compared is no cure."""
    if raw.status != GOOD or eager.status != GOOD:
        return raw
    g = raw.first
    d = compare(g, eager.first, opts)
    if strict and d.status == differential.INCOMPARABLE:
        return Obs(SKIP, None, raw.results, raw.reps_done)
    if g is None or not _diverged(d):
        return raw
    bad = replace(g, outcome=Outcome.GARBAGE, notes=[*g.notes],
                  signature=Signature("garbage", DIVERGENCE,
                                      first_chars(d.summary, SIGNATURE_LINE_CAP)),
                  differential=d.to_dict())
    return Obs(BAD, f"garbage garbage: {DIVERGENCE}", (bad,), raw.reps_done)


def targets(row: Row) -> list[int]:
    """Indices to compare now: the largest restarted passing budget and the kept one."""
    goods = [i for i, o in enumerate(row.obs) if o.status == GOOD]
    out = set(goods[-1:])
    keep = row.last_good_below_frontier
    if keep is not None:
        out.add(keep)
    return sorted(out)


def planned(row: Row, base: Config, opts: AgreementOptions,
            obs: Callable[[PlannedCell], Obs]) -> list[PlannedCell]:
    """The comparison cells due now (largest budget first: a divergence there moves the
    frontier search the most)."""
    if not opts.enabled:
        return []
    cells = [eager_cell(base, row.budgets[i]) for i in reversed(targets(row))]
    return [c for c in cells if not obs(c).decided]


def gate(lad: LadderState, obs: Callable[[PlannedCell], Obs],
         opts: AgreementOptions) -> LadderState:
    """A divergence mode's diagnosis, once eager is known right and stable at its budget."""
    if not is_divergence(lad.mode):
        return lad
    e, e2 = eager_cell(lad.config, lad.config.budget), side_cell(lad.config, opts)
    eo, o2 = obs(e), obs(e2)
    if not o2.decided:
        return replace(lad, decision=None, needed=(e2,), speculative=(),
                       cells={**lad.cells, "E2": e2})
    cells = {**lad.cells, "E2": e2}
    g = obs(PlannedCell(replace(lad.config, graph=True), "frontier")).first
    d, note = which_side(g, eo, o2, opts)
    if d is not None:
        return replace(lad, cells=cells, needed=(), speculative=(), decision=d)
    return replace(lad, cells=cells, notes=(*lad.notes, note))


def which_side(graph: CellResult | None, eo: Obs, o2: Obs,
               opts: AgreementOptions) -> tuple[Decision | None, str]:
    """A graph/eager divergence, once eager ran twice (`o2`: with deterministic inference
    where the host has it, else repeated): the decision it forces (eager differs from it, or
    from the baseline, or the backend is not deterministic: inconclusive), or None and the
    note that eager is stable (the divergence is graph-related)."""
    gd = compare(graph, eo.first, opts)
    det = opts.decides_deterministically
    second = f"eager with {FLAG}" if det else "the eager repeat"
    if o2.status != GOOD or eo.first is None or o2.first is None:
        return None, f"{second} did not pass ({o2.status}): eager's stability unknown"
    same = compare_eager(eo.first, o2.first)
    if same.status != differential.SAME and det:
        return Decision(
            "inconclusive", "deterministic eager", "low", reason="nondeterministic",
            notes=(f"eager differs from eager with {FLAG} (attention backend {opts.backend}): "
                   "its greedy output depends on reduction order, so a graph/eager difference "
                   "is no evidence of a defect",
                   f"eager vs eager with {FLAG}: " + same.summary.split(": ", 1)[-1]),
            would_decide=f"graph vs eager both with {FLAG} (`ddprobe run --differential "
                         f"--extra={FLAG}`)"), ""
    if same.status != differential.SAME:
        return Decision(
            "inconclusive", "eager repeated", "low", reason="nondeterministic",
            notes=("eager disagrees with itself: the greedy output is not deterministic on "
                   "this server, so a graph/eager difference is no evidence of a defect",
                   "eager vs eager again: " + same.summary.split(": ", 1)[-1]),
            would_decide=f"a comparison with {differential.DETERMINISTIC_FLAG} on both "
                         "sides (where the backend has it), or a stored eager baseline "
                         "(--baseline)"), ""
    base_note = _baseline_note(eo.first, opts)
    if base_note and "differs" in base_note:
        return Decision(
            "inconclusive", "stored baseline", "low", reason="eager-differs",
            notes=(base_note,), would_decide="which of eager and the baseline is right: "
                                             "the baseline's config again, or a reference"), ""
    if gd.status == differential.NOT_DECISIVE:
        return Decision(
            "inconclusive", "graph-vs-eager comparison", "low", reason="not-decisive",
            notes=(gd.determinism,),
            would_decide="the comparison on a backend with a deterministic mode (--backend "
                         f"{'/'.join(opts.backends or ()) or 'one the release lists'} and "
                         f"{differential.DETERMINISTIC_FLAG})"), ""
    stable = f"eager with {FLAG}: identical answers (eager is right and deterministic)" \
        if det else "eager repeated: identical answers (eager is stable)"
    return None, stable + (f"; {base_note}" if base_note else "")


def _baseline_note(eager: CellResult, opts: AgreementOptions) -> str:
    if not opts.baseline or not eager.answers:
        return ""
    tasks = sorted(set(opts.baseline) & set(eager.answers))
    if not tasks:
        return f"the stored baseline {opts.baseline_key} has no task in common with eager"
    bad = [t for t in tasks if opts.baseline[t] != eager.answers[t]]
    if bad:
        return (f"eager differs from the stored baseline {opts.baseline_key} in "
                f"{len(bad)}/{len(tasks)} tasks (first: {bad[0]})")
    return f"eager equals the stored baseline {opts.baseline_key} in all {len(tasks)} tasks"


EvidenceLine = tuple[str, list[str], EvidenceDetails]  # summary, cell keys, details


MANUAL_OFF: Final = ("a manual bisect or a replayed session log: a good mark carries no "
                     "answers to compare; `ddprobe run "
                     "--budget B --differential` on the budget kept compares it")


def ok_evidence(row: Row, base: Config, opts: AgreementOptions,
                obs: Callable[[PlannedCell], Obs],
                frontier: Callable[[int], PlannedCell]) -> list[EvidenceLine]:
    """(summary, cells, details) lines for the ok verdict: what was compared, and what not."""
    b = row.budgets
    if not opts.enabled:
        return [(f"graph output not compared with eager ({opts.off_reason}): a silent "
                 "corruption of the greedy output would pass", [], {})]
    out: list[EvidenceLine] = []
    compared = set()
    for i in targets(row):
        e = eager_cell(base, b[i])
        eo = obs(e)
        if not eo.decided:
            continue
        compared.add(i)
        g = frontier(b[i])
        if eo.status != GOOD:
            out.append((f"b{b[i]}: not compared with eager: the eager cell {eo.status}",
                        [g.base_key, e.base_key], {}))
            continue
        go = obs(g).first
        d = compare(go, eo.first, opts)
        cover = differential.batch_coverage(go)
        details: EvidenceDetails = {"differential": d.to_dict()}
        if cover:
            details["batch_coverage"] = cover[1]
        out.append((f"b{b[i]}: {d.summary}" + (f"; {cover[0]}" if cover else ""),
                    [g.base_key, e.base_key], details))
    rest = [i for i, o in enumerate(row.obs) if o.status == GOOD and i not in compared]
    if rest:
        out.append(("not compared with eager: " + ", ".join(f"b{b[i]}" for i in rest)
                    + " (only the largest passing budget and the one kept are compared)",
                    [], {}))
    return out


def unconfirmed(row: Row, base: Config, opts: AgreementOptions,
                obs: Callable[[PlannedCell], Obs]) -> list[int]:
    """Passing budgets whose comparison did not show identical output (not run, failed)."""
    if not opts.enabled:
        return []
    out = []
    for i in targets(row):
        eo = obs(eager_cell(base, row.budgets[i]))
        g = obs(PlannedCell(replace(base, budget=row.budgets[i], graph=True), "frontier"))
        if eo.status != GOOD or compare(g.first, eo.first, opts).status != differential.SAME:
            out.append(row.budgets[i])
    return out


def plan_line(opts: AgreementOptions) -> str:
    if not opts.enabled:
        return (f"     graph vs eager not compared ({opts.off_reason}): a passing graph budget "
                "whose greedy output is silently wrong would be called ok")
    return ("     graph vs eager: the largest passing budget and the kept one again without "
            "CUDA graphs (one restart each, counted in the restarts below), greedy output "
            "compared token by token; a divergence fails the budget and the search goes on "
            f"(then one more: {which_side_line(opts)}, a defect or nondeterminism)")


def which_side_line(opts: AgreementOptions) -> str:
    """How the plan decides which side of a divergence is wrong, and why."""
    if opts.decides_deterministically:
        return f"eager with {FLAG} on {opts.backend} ({opts.deterministic.where})"
    if not opts.deterministic.known:
        return (f"eager with {FLAG} where the host's SGLang has it for the cells' backend "
                "(read from each host's flags), else the eager cell repeated")
    return f"the eager cell repeated ({opts.deterministic.why_not(opts.backend)})"


__all__ = ["AgreementOptions", "COMPARE_MODE", "DIVERGENCE", "MANUAL_OFF", "compare",
           "compare_eager", "eager_cell", "gate", "is_divergence", "judge_graph", "judged",
           "ok_evidence", "plan_line", "planned", "repeat_cell", "side_cell", "targets",
           "unconfirmed", "which_side", "which_side_line"]
