"""Synthetic answers to planned cells: one failure threshold of a known kind (pure).

Used for the restart estimates that `--plan` prints (the planner is run against each possible
threshold position and kind) and by the planner's tests. Nothing here touches a host.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, get_args

from ddprobe.bisect.cells import PlannedCell
from ddprobe.bisect.planner import BisectSpec, Oracle, simulate
from ddprobe.results import CellResult, Outcome, Signature

# the defect a synthetic threshold plants (see `threshold`)
DefectKind = Literal["buffer", "workspace", "capture", "kernel"]
KINDS: Final[tuple[DefectKind, ...]] = get_args(DefectKind)

_SIG: Final[dict[DefectKind, tuple[Outcome, Signature]]] = {
    "buffer": (Outcome.CRASH, Signature("cuda_illegal_address",
                                        "an illegal memory access was encountered")),
    "workspace": (Outcome.CRASH, Signature("cublas", "CUBLAS_STATUS_EXECUTION_FAILED when "
                                                     "calling `cublasGemmEx`")),
    "capture": (Outcome.GARBAGE, Signature("garbage", "accept length 1.0")),
    "kernel": (Outcome.GARBAGE, Signature("garbage", "coding failures")),
}


def result(c: PlannedCell, outcome: Outcome, sig: Signature | None = None) -> CellResult:
    return CellResult(host="sim", config=c.config, outcome=outcome,
                      signature=sig if outcome is not Outcome.OK else None,
                      timings={"restart": 0.0})


def threshold(spec: BisectSpec, at: int | None, kind: DefectKind, culprit: str | None = None
              ) -> Oracle:
    """Every budget >= `at` fails with a defect of `kind`; None: nothing fails.

    buffer: cured by enlarging `culprit` (default: the first suspect); workspace: cured by the
    smaller max bs; capture: fails with graphs whatever is changed; kernel: fails in eager too."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    first = spec.suspects[0].attr if spec.suspects else None
    target = culprit or first

    def answer(c: PlannedCell) -> CellResult:
        fails = at is not None and c.config.budget >= at
        if not fails:
            return result(c, Outcome.OK)
        out, sig = _SIG[kind]
        if kind == "kernel":
            return result(c, out, sig)
        if not c.config.graph:
            return result(c, Outcome.OK)
        if kind == "buffer" and target is not None and target in c.buffers:
            return result(c, Outcome.OK)
        if kind == "workspace" and c.config.max_bs == spec.small_max_bs:
            return result(c, Outcome.OK)
        return result(c, out, sig)

    return answer


def restarts_for(spec: BisectSpec, at: int | None, kind: DefectKind, *, k: int = 1
                 ) -> tuple[int, int]:
    """(restarts, rounds) the planner needs against one synthetic threshold."""
    p, rounds = simulate(spec, threshold(spec, at, kind), k=k)
    return sum(len(r) for r in rounds), len(rounds)


def bounds(spec: BisectSpec, *, k: int = 1, kinds: Sequence[DefectKind] = KINDS
           ) -> dict[str, tuple[int, int]]:
    """Worst (restarts, rounds) over threshold positions, per kind; plus 'none' (all pass)."""
    out: dict[str, tuple[int, int]] = {"none": restarts_for(spec, None, "buffer", k=k)}
    for kind in kinds:
        worst = (0, 0)
        for b in spec.budgets:
            r = restarts_for(spec, b, kind, k=k)
            worst = (max(worst[0], r[0]), max(worst[1], r[1]))
        out[kind] = worst
    return out


def seconds_for(spec: BisectSpec, at: int | None, kind: DefectKind, *, k: int = 1) -> float:
    """The plan's expected seconds against one synthetic threshold (the cost model's
    estimate of each cell it runs; with k hosts, the slowest cell of each round)."""
    p, rounds = simulate(spec, threshold(spec, at, kind), k=k)
    return sum(max(p.estimate(c) for c in r) for r in rounds)


def time_bounds(spec: BisectSpec, *, k: int = 1, kinds: Sequence[DefectKind] = KINDS
                ) -> dict[str, float]:
    """Worst expected seconds over threshold positions, per kind; plus 'none' (all pass)."""
    out = {"none": seconds_for(spec, None, "buffer", k=k)}
    for kind in kinds:
        out[kind] = max(seconds_for(spec, b, kind, k=k) for b in spec.budgets)
    return out
