"""Manual bisect (`ddprobe bisect start|good|bad|skip|next|visualize|reset`), git bisect style.

For hosts ddprobe cannot restart itself (a shared cluster, a server someone else runs): the
user runs each cell by hand and marks its outcome. The session *is* its log: a file of
`ddprobe bisect ...` commands in the format of `ddprobe bisect log` (like git's BISECT_LOG), so
the marks go through the same parser, the same planner and the same verdicts as the automatic
mode and `bisect replay`. Nothing here touches a host (the oversize step's patch is
`bisect/manualpatch.py`'s).

The file is `$DDPROBE_BISECT_SESSION`, else `<runs dir>/BISECT_SESSION` (runs dir:
`$DDPROBE_RUNS`, else ./runs).
"""
from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ddprobe.bisect.cells import BAD, GOOD, PlannedCell, describe
from ddprobe.bisect.planner import Planner
from ddprobe.bisect.sessionlog import (
    MARK_OPTS,
    Mark,
    Session,
    mark_cell,
    mark_result,
    parse_log,
    parse_opts,
)
from ddprobe.bisect.verdicts import build_verdicts
from ddprobe.defaults import OVERSIZE_FACTOR
from ddprobe.errors import ConfigError, UsageError
from ddprobe.results import Verdict
from ddprobe.store import runs_root


def session_path() -> Path:
    env = os.environ.get("DDPROBE_BISECT_SESSION")
    return Path(env) if env else runs_root() / "BISECT_SESSION"


@dataclass
class State:
    """A manual session replayed: the planner fed with every mark, and what it asks next."""

    session: Session
    planner: Planner
    next: PlannedCell | None
    verdicts: list[Verdict]
    left: int


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError("no manual bisect in progress: start one with `ddprobe bisect start "
                         "--budgets 8,16,32,64`") from None
    except OSError as e:
        raise ConfigError(f"cannot read the session: {e.strerror}", path=str(path)) from None


def load(path: Path | None = None) -> State:
    path = path or session_path()
    sessions = parse_log(_read(path), str(path))
    s = sessions[-1]
    p = Planner(s.spec)
    for cell, res in s.marks:
        p.record(cell, res)
    nxt = p.next_cells(1)
    verdicts = build_verdicts(p, host=None if s.hosts == "?" else s.hosts) if not nxt else []
    return State(s, p, nxt[0] if nxt else None, [_by_hand(v) for v in verdicts],
                 p.remaining()[0])


_AUTO_PATCH = "(temporary patch, reverted)"
_HAND_PATCH = "(temporary patch: `ddprobe bisect oversize`, then `--revert`)"


def _by_hand(v: Verdict) -> Verdict:
    """A manual session's oversize evidence: the automatic mode applies and reverts the patch
    itself; here the user did (with `ddprobe bisect oversize`), so no "reverted" is claimed."""
    ev = [replace(e, summary=e.summary.replace(_AUTO_PATCH, _HAND_PATCH))
          if e.kind == "oversize" else e for e in v.evidence]
    return replace(v, evidence=ev)


def start(words: Sequence[str], *, path: Path | None = None) -> State:
    """Begin a session from `start`'s option words (refused while one is in progress)."""
    path = path or session_path()
    if path.exists():
        raise UsageError(f"a manual bisect is already in progress ({path}): "
                         "`ddprobe bisect reset` ends it")
    line = shlex.join(["ddprobe", "bisect", "start", *words])
    parse_log(line, "ddprobe bisect start")  # bad options: one message, nothing written
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# ddprobe manual bisect session (replay it with `ddprobe bisect replay "
                    "FILE`)\n" + line + "\n", encoding="utf-8")
    return load(path)


def mark(verb: Mark, target: str | None, words: Sequence[str], *,
         path: Path | None = None) -> tuple[PlannedCell, State]:
    """Record good/bad/skip for a cell (the one `next` names when no target is given)."""
    path = path or session_path()
    st = load(path)
    opt, pos = parse_opts(words, MARK_OPTS, f"ddprobe bisect {verb}", None)
    if pos:
        raise UsageError(f"unexpected argument {pos[0]!r}")
    if target is None:
        if st.next is None:
            raise UsageError("the bisect is complete: name the cell to mark (a budget or a "
                             "cell key), or `ddprobe bisect reset`")
        target = st.next.key
    cell, _ = mark_cell(st.session.spec, target, opt, f"ddprobe bisect {verb}", None)
    res = mark_result(verb, cell, opt)
    cmd = ["ddprobe", "bisect", verb, cell.key]
    if cell.buffers and ",".join(cell.buffers) not in cell.key:
        cmd += ["--oversize", ",".join(cell.buffers)]
    for k in ("--mode", "--refused"):
        if k in opt and (verb == "bad" if k == "--mode" else verb == "skip"):
            cmd += [k, str(opt[k])]
    with path.open("a", encoding="utf-8") as f:
        f.write(f"# {verb}: [{cell.key}] {describe(res)}\n{shlex.join(cmd)}\n")
    return cell, load(path)


def reset(path: Path | None = None) -> Path | None:
    """End the session; returns the file removed (None when there was none)."""
    path = path or session_path()
    if not path.exists():
        return None
    path.unlink()
    return path


def how_to_run(cell: PlannedCell, factor: int = OVERSIZE_FACTOR) -> str:
    """What the user changes on their server for this cell, in SGLang's launch flags (`factor`:
    the session's oversize factor, for a cell that does not carry its own)."""
    c = cell.config
    parts = [f"budget {c.budget}", "CUDA graphs on" if c.graph else
             "CUDA graphs off (--disable-cuda-graph)"]
    if c.max_bs is not None:
        parts.append(f"--cuda-graph-max-bs {c.max_bs}")
    if c.backend:
        parts.append(f"--attention-backend {c.backend}")
    if cell.buffers:
        parts.append(f"with {', '.join(cell.buffers)} enlarged x{cell.factor or factor} (the "
                     "temporary patch `ddprobe bisect oversize --host HOST` applies; "
                     "`--revert` takes it off after the run)")
    if cell.patch:
        parts.append(f"with the patch {cell.patch} applied")
    if cell.purpose == "sanitize":
        parts.append("under compute-sanitizer --tool memcheck")
    return ", ".join(parts)


PURPOSE_TEXT = {
    "frontier": "search for the first failing budget with CUDA graphs",
    "eager": "eager control: does it fail without CUDA graphs too? (kernel)",
    "oversize": "oversize experiment: do larger captured buffers cure it? (buffer sizing)",
    "max_bs": "max-bs experiment: does a smaller graph max batch size avoid it? (workspace)",
    "sanitize": "compute-sanitizer memcheck (evidence only)",
    "confirm": "does the patch fix it?",
    "residual": "the cure again: does the cured config fail another way? (a second defect)",
}


def row_lines(st: State) -> list[str]:
    """`visualize`: each budget of the graph row, then each failure mode's experiments."""
    ps = st.planner.state()
    out = []
    for i, b in enumerate(ps.row.budgets):
        o = ps.row.obs[i]
        if o.status == GOOD:
            what = "good"
        elif o.status == BAD:
            what = f"bad   {o.mode}"
        elif i in ps.row.inferred:
            what = f"bad   {ps.row.inferred[i]} (inferred: between two failures of this mode)"
        elif i in ps.row.assumed_good:
            what = "good (assumed: below a passing budget)"
        else:
            what = o.status
        out.append(f"b{b:<5} graph  {what}")
    for lad in ps.ladders:
        out.append(f"mode {lad.mode} (from b{lad.config.budget}):")
        for step in lad.order:
            cell = lad.cells.get(step)
            if cell is None:
                continue
            o = st.planner.obs(cell)
            out.append(f"  {cell.purpose:<9} {cell.key}: {o.status}"
                       + (f" ({o.mode})" if o.mode else ""))
        if lad.decision is not None:
            out.append(f"  -> {lad.decision.kind} ({lad.decision.decided_by}, "
                       f"{lad.decision.confidence})")
    return out
