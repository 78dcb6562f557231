"""What a planned cell will cost, from this host's earlier cells (pure but for `host_history`).

Every cell records its phases (`cell.phases`: start, load, capture, health, probes, stop, the
load and capture from the server's own log lines). The cost model takes the median of each
phase over the host's earlier cells, split the ways that change a phase:

* the weight load: real weights vs `--load-format dummy` (a cheap cell);
* the capture: per captured batch size (the capture line's seconds / the sizes captured), so
  a cheap cell that captures 5 sizes is estimated from a cell that captured 12;
* the probes: a full probe vs a cheap cell's short one;
* eager cells capture nothing;
* a cheap cell's load and probes with no cheap cell in the history: at most the real cells'.

A phase with no history comes from `DEFAULTS` (a mid-sized model on a rented node), and the
estimate says so (`CellEstimate.from_history`). `host_history` reads the journals under the
runs directory (the newest `MAX_RUNS` runs), every cell of the host's name: a per-host history
across runs.
"""
from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ddprobe.cell.phases import CellPhases

MAX_RUNS: Final = 30
MAX_CELLS: Final = 400
# seconds; what a restart costs with nothing learned yet (a tens-of-GB model on 8 GPUs)
DEFAULTS: Final[Mapping[str, float]] = {
    "start": 5.0, "load": 240.0, "load_dummy": 20.0, "capture_per_bs": 2.0, "health": 30.0,
    "probes": 30.0, "probes_cheap": 5.0, "stop": 10.0,
}
DEFAULT_CAPTURED: Final = 12  # SGLang's default list up to max bs 64


@dataclass(frozen=True)
class PastCell:
    """What one earlier cell of the host cost: its phases and what kind of cell it was."""

    phases: CellPhases
    graph: bool
    cheap: bool
    captured: int | None  # how many batch sizes it captured (None: not known)

    @classmethod
    def from_journal(cls, d: Mapping[str, Any]) -> PastCell | None:
        extra = d.get("extra") or {}
        ph = CellPhases.from_dict(extra.get("phases"))
        if ph is None:
            return None
        plan = extra.get("plan") or {}
        cfg = d.get("config") or {}
        eff = d.get("effective") or {}
        bs = eff.get("cuda_graph_bs") if isinstance(eff, Mapping) else None
        return cls(ph, bool(cfg.get("graph", True)), bool(plan.get("cheap")),
                   len(bs) if isinstance(bs, list) and bs else None)


@dataclass(frozen=True)
class CellEstimate:
    seconds: Mapping[str, float]
    from_history: tuple[str, ...] = ()  # the phases learned from the host's cells

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


@dataclass(frozen=True)
class CostModel:
    history: tuple[PastCell, ...] = ()
    defaults: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULTS))

    def _learned(self, name: str, *, cheap: bool | None = None,
                 graph: bool | None = None) -> float | None:
        xs = [c.phases.seconds[name] for c in self.history if name in c.phases.seconds
              and (cheap is None or c.cheap == cheap) and (graph is None or c.graph == graph)
              and (name not in ("load", "capture") or name in c.phases.from_log)]
        return _median(xs)

    def _per_bs(self) -> float | None:
        xs = [c.phases.seconds["capture"] / c.captured for c in self.history
              if c.graph and c.captured and "capture" in c.phases.from_log]
        return _median(xs)

    def estimate(self, *, graph: bool, cheap: bool, captured: int | None = None) -> CellEstimate:
        """Seconds per phase of a cell: with CUDA graphs or not, cheap or not, capturing
        `captured` batch sizes (None: as many as the host's earlier graph cells, or 12)."""
        learned: list[str] = []
        out: dict[str, float] = {}

        def pick(phase: str, value: float | None, default_key: str) -> None:
            if value is not None:
                out[phase] = value
                learned.append(phase)
            else:
                out[phase] = self.defaults[default_key]

        pick("start", self._learned("start"), "start")
        pick("load", self._learned("load", cheap=cheap), "load_dummy" if cheap else "load")
        if cheap:
            self._at_most_real(out, learned, "load")
        if graph:
            per = self._per_bs()
            n = captured or _median([float(c.captured) for c in self.history
                                     if c.graph and c.captured and not c.cheap]) \
                or DEFAULT_CAPTURED
            pick("capture", None if per is None else per * n, "capture_per_bs")
            if per is None:
                out["capture"] = self.defaults["capture_per_bs"] * n
        else:
            out["capture"] = 0.0
        pick("health", self._learned("health"), "health")
        pick("probes", self._learned("probes", cheap=cheap), "probes_cheap" if cheap
             else "probes")
        if cheap:
            self._at_most_real(out, learned, "probes")
        pick("stop", self._learned("stop"), "stop")
        return CellEstimate(out, tuple(learned))

    def _at_most_real(self, out: dict[str, float], learned: list[str], phase: str) -> None:
        """A cheap cell's phase with no cheap history is at most what the host's real cells
        took (random weights read nothing; the short probe asks less): the default for a
        tens-of-GB model would overstate a small model's dummy load."""
        real = self._learned(phase, cheap=False)
        if phase not in learned and real is not None and real < out[phase]:
            out[phase] = real
            learned.append(phase)


def host_history(root: Path, host: str, *, max_runs: int = MAX_RUNS,
                 max_cells: int = MAX_CELLS) -> tuple[PastCell, ...]:
    """The host's earlier cells with phases, newest runs first, from the journals under `root`
    (a journal that cannot be read is skipped: history is a hint, never a failure)."""
    if not root.is_dir():
        return ()
    runs = sorted((p for p in root.iterdir() if (p / "journal.jsonl").is_file()),
                  key=lambda p: p.name, reverse=True)[:max_runs]
    out: list[PastCell] = []
    for run in runs:
        for d in _cells(run / "journal.jsonl"):
            if d.get("host") != host or (d.get("outcome") in ("error", "refused")):
                continue
            pc = PastCell.from_journal(d)
            if pc is not None:
                out.append(pc)
            if len(out) >= max_cells:
                return tuple(out)
    return tuple(out)


def _cells(path: Path) -> Iterable[Mapping[str, Any]]:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if '"type": "cell"' not in line and '"type":"cell"' not in line:
                    continue
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if isinstance(d, dict):
                    yield d
    except OSError:
        return
