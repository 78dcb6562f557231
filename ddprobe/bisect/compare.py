"""Where hosts that differ (GPU, driver, version) disagree about the same plan (pure)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ddprobe.results import Verdict


class _Outcome(Protocol):
    name: str
    identity: dict[str, Any]
    verdicts: list[Verdict]


def budget_labels(verdicts: Sequence[Verdict]) -> dict[int, str]:
    """budget -> verdict kind (ok, buffer_sizing, ...), from the verdicts covering it."""
    out: dict[int, str] = {}
    for v in verdicts:
        for b in v.budgets:
            out.setdefault(b, v.kind)
    return out


def disagreements(outcomes: Sequence[_Outcome]) -> list[dict[str, Any]]:
    """One entry per budget whose verdict kind differs between groups of hosts."""
    labels = [(o, budget_labels(o.verdicts)) for o in outcomes]
    budgets = sorted({b for _, lab in labels for b in lab})
    out: list[dict[str, Any]] = []
    for b in budgets:
        per = {o.name: lab.get(b, "not tested") for o, lab in labels}
        if len(set(per.values())) <= 1:
            continue
        gpus = {" ".join(x for x in (o.identity.get("gpu"), o.identity.get("labels")) if x)
                for o, _ in labels}
        versions = {o.identity.get("version") for o, _ in labels}
        why = []
        if len(gpus) > 1:
            why.append("architecture-specific: " + " vs ".join(sorted(str(g) for g in gpus)))
        if len(versions) > 1:
            why.append("version-specific: " + " vs ".join(sorted(str(v) for v in versions)))
        text = f"b{b}: " + ", ".join(f"{n} {k}" for n, k in per.items()) + (
            f" ({'; '.join(why)})" if why else "")
        out.append({"budget": b, "per_group": per, "why": why, "text": text})
    return out
