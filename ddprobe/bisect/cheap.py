"""Cheap cells: a cell whose question is only "does it crash" runs without the real weights.

A planned cell knows the question it answers (`question`): the frontier's and an eager
control's "ok, or which failure", answered by a crash whatever the weights; the oversize and
max-bs experiments of a crash mode "does this crash go away", answered either way. Such a
cell first runs cheap, where the host's SGLang accepts it (checked before the plan: the flags
the install defines, then its own argument handling through the preflight):

* `--load-format dummy` (random weights, nothing read from disk) and, where the release has
  it, `--speculative-draft-load-format dummy` (every release's draft worker otherwise loads
  with the target's `--load-format`: the same ServerArgs; 0.5.10+ lets the flag override it);
* `--cuda-graph-bs` with only the batch sizes the probes use (SGLang's own list up to the
  probe concurrency) plus the max bs the cell runs: SGLang sets the max bs to the list's
  largest entry, so every buffer sized by it is the size it is in the real cell;
* `--skip-server-warmup`;
* a short probe that stops once the server has died.

What a cheap cell can say (`answer`): a crash is the config's crash (the buffers, the captured
max bs and the kernels are the real cell's; only the numbers in them are random); no crash
says nothing about ok vs garbage (random weights always give garbage), so a frontier cell
and an eager control then run with the real weights. For an experiment of a crash mode, no
crash of that kind means the experiment avoided it; at the mode's first budget such a cure is
run again with the real weights (residual.py), so there the cheap run saves the real one only
when the crash stays (the planner bets on it only where that pays: planner.question_is_cheap).
Every verdict names its cheap cells.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

from ddprobe.bisect.cells import BAD, GOOD, Obs, PlannedCell, same_failure
from ddprobe.defaults import PROBE_CONCURRENCY
from ddprobe.errors import RefusedError
from ddprobe.inventory import Host
from ddprobe.remote import Remote
from ddprobe.results import CellResult, Config, Outcome
from ddprobe.server.caches import RunCaches

# what a planned cell asks: ok-or-which-failure needs the real weights unless it crashes;
# crash-or-not (an experiment on a crash mode) is answered by a cheap cell either way
Question = Literal["outcome", "crash"]
CHEAP_TAG: Final = "cheap"
DUMMY: Final = ("--load-format", "dummy")
DRAFT_DUMMY: Final = ("--speculative-draft-load-format", "dummy")
NO_WARMUP: Final = "--skip-server-warmup"
BS_FLAG: Final = "--cuda-graph-bs"
CHEAP_PROBE_TOKENS: Final = 48


def sglang_capture_list(max_bs: int) -> list[int]:
    """SGLang's default capture list up to `max_bs` (server_args, 0.4.x-0.5.x, speculative)."""
    bs = [1, 2, 4, 8, 12] + list(range(16, 257, 8))
    return sorted({b for b in bs if b <= max_bs} | {max_bs})


def capture_list(max_bs: int, concurrency: int) -> list[int]:
    """The batch sizes a cheap cell captures: those the probes can form, and the max bs."""
    return sorted({b for b in sglang_capture_list(max_bs) if b <= concurrency} | {max_bs})


@dataclass(frozen=True)
class CheapSupport:
    """Whether this host's SGLang can run cheap cells, and with which flags."""

    available: bool
    note: str = ""  # why not, or what is left out (no --cuda-graph-bs: every size captured)
    draft_flag: bool = False  # the release defines --speculative-draft-load-format
    bs_flag: bool = False  # the release defines --cuda-graph-bs
    warmup_flag: bool = False
    max_bs: int | None = None  # the max bs the server captures by default (preflight)
    concurrency: int = PROBE_CONCURRENCY  # the probes' (capture_list covers their batch)

    def args(self, config: Config) -> tuple[str, ...]:
        out = list(DUMMY) + (list(DRAFT_DUMMY) if self.draft_flag else [])
        top = config.max_bs or self.max_bs
        if self.bs_flag and config.graph and top:
            out += [BS_FLAG, *map(str, capture_list(top, self.concurrency))]
        if self.warmup_flag:
            out.append(NO_WARMUP)
        return tuple(out)

    def captured(self) -> int | None:
        """How many batch sizes a cheap graph cell captures (None: every default size)."""
        if not (self.available and self.bs_flag and self.max_bs):
            return None
        return len(capture_list(self.max_bs, self.concurrency))

    def config(self, config: Config) -> Config:
        return replace(config, extra_args=(*config.extra_args, *self.args(config)))

    def what(self, config: Config) -> str:
        """The cheap launch, for notes and verdicts."""
        return " ".join(self.args(config))


OFF: Final = CheapSupport(False, "cheap cells off")


def support_from_flags(names: Sequence[str] | None, *, max_bs: int | None,
                       concurrency: int) -> CheapSupport:
    """What the install's flags allow (None: its flags could not be read)."""
    if names is None:
        return CheapSupport(False, "the install's launch flags could not be read")
    have = set(names)
    if "--load-format" not in have:
        return CheapSupport(False, "this SGLang has no --load-format")
    notes = []
    bs = BS_FLAG in have
    if not bs:
        notes.append("no --cuda-graph-bs: cheap cells capture every batch size")
    elif max_bs is None:
        notes.append("the max bs the server captures is not known: cheap cells capture "
                     "every batch size")
    return CheapSupport(True, "; ".join(notes), draft_flag=DRAFT_DUMMY[0] in have,
                        bs_flag=bs, warmup_flag=NO_WARMUP in have, max_bs=max_bs,
                        concurrency=concurrency)


def crashed(c: CellResult | None) -> bool:
    return c is not None and c.outcome is Outcome.CRASH


def crash_mode(mode: str | None) -> bool:
    """Is a failure mode (a `cells.mode_key`, or a ladder label `MODE @bN`) a crash?"""
    return bool(mode) and str(mode).startswith("crash ")


def crash_prior(budget: int, budgets: Sequence[int], obs: Callable[[int], Obs]) -> float:
    """The chance a frontier budget crashes, from the nearest budget above it that ran
    (`obs`: a budget's frontier result): failures grow with the budget (the search's own
    premise) and one failure mode spans neighbouring budgets, so below a pass, or below a
    failure that is no crash, a crash is unlikely (0.05); below a crash, likely (0.75); with
    nothing above known, even (0.5)."""
    for b in (x for x in budgets if x > budget):
        o = obs(b)
        if o.status == GOOD:
            return 0.05
        if o.status == BAD:
            return 0.75 if crashed(o.first) else 0.05
    return 0.5


def at_diagnosis(cell: PlannedCell, budgets: Sequence[int], obs: Callable[[int], Obs]) -> bool:
    """Is `cell` at the budget where its mode's diagnosis runs (its first failing budget, or
    the budget a `MODE @bN` diagnosis names), not a control at another budget?"""
    mode = str(cell.mode)
    at = re.fullmatch(r"(.*) @b(\d+)", mode)
    if at is not None:
        return int(at.group(2)) == cell.config.budget
    first = next((b for b in budgets if same_failure(obs(b).mode, mode)), None)
    return first is None or first == cell.config.budget


def host_support(r: Remote, host: Host, base: Config, *, max_bs: int | None, concurrency: int,
                 enabled: bool, caches: RunCaches) -> CheapSupport:
    """Whether `host` runs cheap cells: the option and the inventory allow it, the install
    defines the flags, and its own argument handling accepts a cheap launch (the preflight)."""
    from ddprobe.server.launch import build_launch, check_launch, host_flags
    from ddprobe.server.preflight import preflight_launch
    from ddprobe.server.registry import get_manager
    if not enabled:
        return replace(OFF, note="cheap cells off (--no-cheap-cells)")
    if not host.server.cheap_cells:
        return replace(OFF, note=f"cheap cells off for {host.name} (inventory: "
                                 "server.cheap_cells false)")
    flags, why = host_flags(r, host, cache=caches.flags)
    sup = support_from_flags(flags.names if flags is not None else None, max_bs=max_bs,
                             concurrency=concurrency)
    if not sup.available:
        return replace(sup, note=why or sup.note)
    cfg = sup.config(replace(base, graph=True))
    try:
        ln = check_launch(build_launch(host, cfg, flags, template=get_manager(r, host)
                                       .template()), flags)
        preflight_launch(r, host, ln)
    except RefusedError as e:
        return CheapSupport(False, f"the host's SGLang refuses a cheap launch: {e}")
    return sup
