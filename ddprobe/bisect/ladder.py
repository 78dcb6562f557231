"""One failure mode's diagnosis: which experiment next, and what the results decide (pure).

The experiments, all at the mode's first failing budget:

* eager control (`E`): the same config without CUDA graphs. Fails too -> kernel.
* oversize (`O`): a temporary patch enlarging the suspect captured buffers x4 (the suspects come
  from the static evidence, grep-buffers). Passes -> buffer sizing, then the suspect set is
  halved until one buffer is named. Still failing with every suspect enlarged -> not a suspect
  buffer (graph capture, unless a smaller max bs cures it).
* max bs (`M`): a smaller --cuda-graph-max-bs. Passes -> a fixed-capacity workspace is too
  small for max_bs x draft tokens (buffer sizing); it does not tell buffer from capture alone.

Every experiment except `E` changes only graph capture, so a cure by `O` or `M` proves the
failure graph-related without the eager control. The order is picked from the failure's
signature so that the likely-decisive experiment runs first ("cheapest first" in restarts):
a memory fault (illegal address, ...) suggests an overrun: O first; a capacity error at capture
(cuBLAS, OOM) suggests a workspace: M first; anything else (garbage, hang): E first.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from ddprobe.bisect.cells import BAD, GOOD, UNTESTED, Obs, PlannedCell
from ddprobe.results import CellResult, Config

MEMORY_KINDS: Final = frozenset({"cuda_illegal_address", "cuda_misaligned_address",
                                 "cuda_device_assert", "cuda_launch_failure", "rocm_memory_fault",
                                 "sanitizer_oob", "segfault"})
CAPACITY_KINDS: Final = frozenset({"cublas", "cudnn", "oom", "capture_range"})
ORDERS: Final = ("auto", "eager-first", "graph-first")


def failure_class(c: CellResult | None) -> str:
    """memory | capacity | other, from the signature (and the phase where it struck)."""
    if c is None or c.signature is None:
        return "other"
    kind = c.signature.kind
    if kind in MEMORY_KINDS:
        return "memory"
    if kind in CAPACITY_KINDS:
        return "capacity"
    return "other"


def step_order(cls: str, order: str) -> tuple[str, ...]:
    graph = {"memory": ("O", "M"), "capacity": ("M", "O"), "other": ("O", "M")}[cls]
    if order == "eager-first":
        return ("E", *graph)
    if order == "graph-first":
        return (*graph, "E")
    return {"memory": ("O", "E", "M"), "capacity": ("M", "O", "E"),
            "other": ("E", "O", "M")}[cls]


@dataclass(frozen=True)
class Decision:
    kind: str  # buffer_sizing | graph_capture | kernel | inconclusive
    decided_by: str  # eager control | oversize experiment | oversize bisection | max-bs ...
    confidence: str  # high | medium | low
    buffers: tuple[str, ...] = ()  # named buffer(s), for buffer_sizing by oversize
    by_elimination: bool = False
    workspace: bool = False  # buffer_sizing decided by the max-bs experiment
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class LadderState:
    mode: str
    config: Config  # the failing graph config (first failing budget of the mode)
    cls: str
    order: tuple[str, ...]
    decision: Decision | None
    needed: tuple[PlannedCell, ...]
    speculative: tuple[PlannedCell, ...]
    naming: tuple[str, ...] = ()  # candidates still in the oversize bisection
    cells: dict[str, PlannedCell] = field(default_factory=dict)  # step name -> planned cell

    @property
    def done(self) -> bool:
        return self.decision is not None and not self.needed


def cured(o: Obs, mode: str) -> Obs:
    """A graph experiment judged against the mode it tests: a result that fails *differently*
    (another failure mode shows once this one is avoided, e.g. b64's cuBLAS failure is gone
    with a smaller max bs and b32's garbage appears) counts as avoiding this mode."""
    if o.status == BAD and o.mode != mode:
        return Obs(GOOD, o.mode, o.results, o.reps_done)
    return o


def _first_half(c: Sequence[str]) -> tuple[str, ...]:
    return tuple(c[:max(1, len(c) // 2)])


def diagnose(mode: str, config: Config, failing: CellResult | None, *, suspects: Sequence[str],
             small_max_bs: int, order: str, obs: Callable[[PlannedCell], Obs]) -> LadderState:
    """Where the mode's diagnosis stands, and which cells it needs next."""
    cls = failure_class(failing)
    steps = step_order(cls, order)
    E = PlannedCell(replace(config, graph=False), "eager", mode)
    M = PlannedCell(replace(config, max_bs=small_max_bs), "max_bs", mode)
    O = PlannedCell(config, "oversize", mode, buffers=tuple(suspects)) if suspects else None
    cells = {"E": E, "M": M, **({"O": O} if O else {})}
    eo = obs(E)
    mo, oo = cured(obs(M), mode), cured(obs(O), mode) if O else Obs("none")

    # naming: halve the suspects while the oversize cure holds
    naming: tuple[str, ...] = ()
    naming_next: PlannedCell | None = None
    naming_spec: list[PlannedCell] = []
    by_elim = False
    named_stuck = False
    if O is not None and oo.status == GOOD:
        cand = tuple(suspects)
        while len(cand) > 1:
            t = _first_half(cand)
            ot = PlannedCell(config, "oversize", mode, buffers=t)
            st = cured(obs(ot), mode).status
            if st == GOOD:
                cand, by_elim = t, False
            elif st == BAD:
                cand, by_elim = tuple(x for x in cand if x not in t), True
            elif st == UNTESTED or not obs(ot).decided:
                naming_next = ot
                for sub in (t, tuple(x for x in cand if x not in t)):
                    if len(sub) > 1:
                        naming_spec.append(PlannedCell(config, "oversize", mode,
                                                       buffers=_first_half(sub)))
                break
            else:  # skip/flaky: cannot narrow further
                named_stuck = True
                break
        naming = cand

    decision = _decide(mode, cls, eo, oo, mo, has_suspects=O is not None)
    if decision is not None and decision.decided_by == "oversize experiment":
        if naming_next is not None:
            needed: tuple[PlannedCell, ...] = (naming_next,)
            decision = replace(decision, buffers=naming)
            return LadderState(mode, config, cls, steps, decision, needed, tuple(naming_spec),
                               naming, cells)
        how = "oversize bisection" if len(suspects) > 1 and len(naming) == 1 else \
            "oversize experiment"
        notes = decision.notes
        if named_stuck:
            notes += (f"could not narrow the enlarged set below {len(naming)} buffers "
                      "(a narrowing cell did not run)",)
        elif len(naming) > 1:
            notes += ("several buffers enlarged together cured it",)
        decision = replace(decision, buffers=naming, by_elimination=by_elim, decided_by=how,
                           confidence="medium" if by_elim or named_stuck else "high",
                           notes=notes)
    if decision is not None:
        return LadderState(mode, config, cls, steps, decision, (), (), naming, cells)

    remaining = [s for s in steps if s in cells and not obs(cells[s]).decided]
    if not remaining:
        return LadderState(mode, config, cls, steps, _inconclusive(eo, oo, mo), (), (), naming,
                           cells)
    needed = (cells[remaining[0]],)
    spec = [cells[s] for s in remaining[1:]]
    if O is not None and len(suspects) > 1 and "O" in remaining:
        # if the oversize cure holds, the first halving cell is the next one needed
        spec.insert(0 if cls == "memory" else len(spec),
                    PlannedCell(config, "oversize", mode, buffers=_first_half(suspects)))
    return LadderState(mode, config, cls, steps, None, needed, tuple(spec), naming, cells)


def _decide(mode: str, cls: str, eo: Obs, oo: Obs, mo: Obs, *, has_suspects: bool
            ) -> Decision | None:
    e, o, m = eo.status, oo.status, mo.status
    if e == BAD:
        same = eo.mode == mode
        notes = () if same else (f"without graphs it fails differently: {eo.mode}",)
        return Decision("kernel", "eager control", "high" if same else "medium", notes=notes)
    if o == GOOD:
        return Decision("buffer_sizing", "oversize experiment", "high")
    if m == GOOD:
        strong = cls == "capacity" or o == BAD
        return Decision("buffer_sizing", "max-bs experiment", "high" if strong else "medium",
                        workspace=True)
    oversize_ruled_out = o == BAD or not has_suspects or (not oo.usable and oo.decided)
    needs_m = cls != "other" or o != BAD
    if e == GOOD and oversize_ruled_out and (m == BAD or not needs_m):
        if o == BAD and m == BAD:
            conf = "high"
        elif o == BAD:
            conf = "high" if cls == "other" else "medium"
        else:
            conf = "low"  # no captured buffer could be enlarged: capture by exclusion only
        notes: tuple[str, ...] = ()
        if o != BAD:
            notes = ("no suspect buffer could be enlarged" if not has_suspects else
                     "the oversize cell did not run",)
        return Decision("graph_capture", "oversize experiment" if o == BAD else
                        "max-bs experiment", conf, notes=notes)
    return None


def _inconclusive(eo: Obs, oo: Obs, mo: Obs) -> Decision:
    notes = []
    for name, o in (("eager control", eo), ("oversize", oo), ("max-bs", mo)):
        if o.status not in (GOOD, BAD, "none"):
            notes.append(f"{name}: {o.status}")
    if eo.status == GOOD:
        return Decision("inconclusive", "eager control", "low",
                        notes=("graph-related (eager passes), but buffer sizing and graph "
                               "capture could not be told apart", *notes))
    return Decision("inconclusive", "none", "low", notes=tuple(notes))
