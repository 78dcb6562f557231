"""Planned cells and what their results say, for the planner (pure: no I/O).

A `PlannedCell` is one experiment the planner wants: a server config plus why it is wanted
(frontier search, eager control, oversize patch, smaller max bs, ...). Its `key` is stable and
human-readable (`b16-graph`, `b16-graph+oversize[cuda_graph_custom_mask]`, `b16-eager#2`) and is
what the journal, the session log and `--resume` match on.

`observe()` folds a cell's results (one per repeat) into one `Obs`: good, bad (with its failure
mode), skip (infrastructure), refused, flaky (repeats disagree) or pending (repeats still due).
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, get_args

from ddprobe.results import CellKind, CellResult, Config, Outcome, Purpose, known

PURPOSES: Final[tuple[Purpose, ...]] = get_args(Purpose)

# What the results of one planned cell say (Obs.status). The last two are the ladder's, for
# an experiment that is no evidence: `none`, it cannot be planned (no suspect to enlarge, no
# smaller max bs); `same`, the max-bs experiment's server ran the failing cell's max bs.
Status = Literal["good", "bad", "skip", "refused", "flaky", "pending", "untested", "none",
                 "same"]
GOOD: Final = "good"
BAD: Final = "bad"
SKIP: Final = "skip"
REFUSED: Final = "refused"
FLAKY: Final = "flaky"
PENDING: Final = "pending"
UNTESTED: Final = "untested"
NONE: Final = "none"
SAME: Final = "same"


@dataclass(frozen=True)
class PlannedCell:
    config: Config
    purpose: Purpose
    mode: str | None = None  # the failure mode a diagnosis cell serves
    buffers: tuple[str, ...] = ()  # oversize: the buffers enlarged for this cell
    patch: str | None = None  # confirm: the patch applied for this cell
    rep: int = 1  # 1-based repeat index (--repeat N)
    factor: int | None = None  # oversize: the enlargement factor when not the run's default
    cheap: bool = False  # run with dummy weights, few captured sizes, a short probe (cheap.py)

    @property
    def base_key(self) -> str:
        """Identity of the experiment, the same for all its repeats."""
        k = self.config.key
        if self.buffers:
            names = ",".join(self.buffers)
            if len(names) > 60:
                digest = hashlib.sha1(names.encode()).hexdigest()[:6]
                names = f"{len(self.buffers)} buffers:{digest}"
            k += f"+oversize[{names}]"
            if self.factor:
                k += f"x{self.factor}"
        if self.patch:
            k += f"+patch[{patch_name(self.patch)}]"
        if self.purpose == "sanitize":
            k += "+sanitize"
        if self.purpose == "compare":  # the eager cell again, to compare its answers
            k += "+again"
        if self.cheap:
            k += "+cheap"
        return k

    @property
    def key(self) -> str:
        return self.base_key if self.rep == 1 else f"{self.base_key}#{self.rep}"

    @property
    def kind(self) -> CellKind:
        return "sanitize" if self.purpose == "sanitize" else "cell"

    def with_rep(self, rep: int) -> PlannedCell:
        return replace(self, rep=rep)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "base_key": self.base_key, "config": self.config.to_dict(),
                "purpose": self.purpose, "mode": self.mode, "buffers": list(self.buffers),
                "patch": self.patch, "rep": self.rep, "factor": self.factor,
                **({"cheap": True} if self.cheap else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PlannedCell:
        return cls(config=Config.from_dict(d["config"]),
                   purpose=known(Purpose, d.get("purpose"), "cell.extra.plan.purpose"),
                   mode=d.get("mode"), buffers=tuple(d.get("buffers") or ()),
                   patch=d.get("patch"), rep=int(d.get("rep") or 1),
                   factor=int(d["factor"]) if d.get("factor") else None,
                   cheap=bool(d.get("cheap")))

    def twin(self) -> PlannedCell:
        """The cheap run of this cell (or, of a cheap one, the real run)."""
        return replace(self, cheap=not self.cheap, rep=1)


def patch_name(spec: str) -> str:
    """A patch spec (path or name) as shown in keys: the file stem."""
    base = spec.rstrip("/").rsplit("/", 1)[-1]
    return base[:-6] if base.endswith(".patch") else base


_NUM: Final = re.compile(r"\d+(?:\.\d+)?")


def mode_key(c: CellResult) -> str:
    """The failure mode of a bad result: outcome plus normalised signature.

    Two cells are one mode when both agree. Numbers are stripped from garbage/degraded keys
    (they carry measured values such as an acceptance length, which vary run to run); crash
    signatures are already normalised by `ddprobe.signatures`."""
    sig = c.signature
    if sig is None:
        return c.outcome.value
    key = sig.key
    if c.outcome in (Outcome.GARBAGE, Outcome.DEGRADED) or sig.kind in ("garbage", "degraded"):
        key = _NUM.sub("N", key)
    return f"{c.outcome.value} {sig.kind}: {key}"


def same_failure(a: str | None, b: str | None) -> bool:
    """Two failure modes are the same failure, wherever it struck (capture or serving)."""
    if a is None or b is None:
        return a == b
    return a.replace("[capture] ", "") == b.replace("[capture] ", "")


def status_of(c: CellResult) -> Status:
    if c.outcome is Outcome.OK:
        return GOOD
    if c.outcome is Outcome.ERROR:
        return SKIP
    if c.outcome is Outcome.REFUSED:
        return REFUSED
    return BAD


@dataclass(frozen=True)
class Obs:
    """What the results of one planned cell (all its repeats) say."""

    status: Status
    mode: str | None = None  # for bad
    results: tuple[CellResult, ...] = field(default=(), repr=False)
    reps_done: int = 0

    @property
    def decided(self) -> bool:
        return self.status not in (PENDING, UNTESTED)

    @property
    def usable(self) -> bool:
        """Good or bad: a result the search and the verdicts can rest on."""
        return self.status in (GOOD, BAD)

    @property
    def first(self) -> CellResult | None:
        """The representative result: the first that agrees with the status."""
        for c in self.results:
            st = status_of(c)
            if st == self.status or (self.status == FLAKY and st in (GOOD, BAD)):
                return c
        return self.results[0] if self.results else None


UNTESTED_OBS: Final = Obs(UNTESTED)


def observe(results: Sequence[CellResult], repeat: int = 1) -> Obs:
    """Fold the repeats of one cell. Infrastructure errors never count as disagreement."""
    if not results:
        return UNTESTED_OBS
    res = tuple(results)
    classes = {(status_of(c), mode_key(c) if status_of(c) == BAD else None)
               for c in res if status_of(c) != SKIP}
    if len(classes) > 1:
        return Obs(FLAKY, None, res, len(res))
    if len(res) < max(1, repeat):
        return Obs(PENDING, None, res, len(res))
    if not classes:
        return Obs(SKIP, None, res, len(res))
    st, mode = next(iter(classes))
    return Obs(st, mode, res, len(res))


def describe(c: CellResult | None) -> str:
    """One line for logs and evidence: `crash cuda_illegal_address: ...` / `ok accept 4.5`."""
    if c is None:
        return "not run"
    if c.cheap:
        if c.outcome is Outcome.CRASH and c.signature is not None:
            return f"crash {c.signature.id} (cheap cell: dummy weights)"
        if c.outcome not in (Outcome.ERROR, Outcome.REFUSED):
            return "cheap cell: no crash with dummy weights; ok vs garbage not checked"
    parts = [c.outcome.value]
    p = c.probes
    sig = c.signature
    if c.outcome in (Outcome.ERROR, Outcome.REFUSED) and c.error:
        parts.append(c.error)
    elif sig is not None and c.outcome is not Outcome.OK:
        # a garbage signature's key already carries the measured acceptance and coding score
        parts.append(sig.key if sig.kind == c.outcome.value else sig.id)
        if sig.kind == c.outcome.value:
            p = None if p is None else type(p)(tok_s=p.tok_s)
    if p is not None:
        if p.accept_length is not None:
            parts.append(f"accept {p.accept_length:.2f}")
        if p.total:
            parts.append(p.label)
        if p.tok_s is not None:
            parts.append(f"{p.tok_s:.0f} tok/s")
    return " ".join(parts)
