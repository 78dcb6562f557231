"""`ddprobe bisect log RUN_ID` and `ddprobe bisect replay FILE`: git bisect's session log.

The log is a script, one command a line, with `#` comments a person reads (the format of
`git bisect log`):

    ddprobe bisect start --host testbed --budgets 8,16,32,64 --small-max-bs 16 \
        --suspects cuda_graph_custom_mask
    # bad: [b64-graph] crash cublas: [capture] CUBLAS_STATUS_EXECUTION_FAILED ...
    ddprobe bisect bad b64-graph --mode 'crash cublas: [capture] CUBLAS_STATUS_...'
    # good: [b8-graph] ok accept 4.54 coding 31/31 562 tok/s
    ddprobe bisect good b8-graph
    # first bad config: [b16-graph] crash cuda_illegal_address: ...
    # verdict: b16 buffer_sizing (oversize experiment, high): cuda_graph_custom_mask at ...

Replaying re-applies the marks to the planner and re-derives the verdicts without touching a
host (like `git bisect replay`, it does not re-run anything). Edit a wrong mark out of the
file and replay it to see what the bisect would have concluded.
"""
from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, get_args

from ddprobe.bisect.agreement import MANUAL_OFF, AgreementOptions
from ddprobe.bisect.cells import BAD, GOOD, REFUSED, PlannedCell, describe, status_of
from ddprobe.bisect.ladder import Order
from ddprobe.bisect.planner import DEFAULT_SMALL_MAX_BS, BisectSpec, Planner, PlanOptions
from ddprobe.bisect.static import Suspect
from ddprobe.bisect.verdicts import build_verdicts
from ddprobe.defaults import OVERSIZE_FACTOR
from ddprobe.errors import ConfigError, DdprobeError
from ddprobe.intlist import IntListError, budget_set, parse_ints
from ddprobe.results import (
    CellResult,
    Config,
    Outcome,
    Purpose,
    Signature,
    UnknownValue,
    Verdict,
    known,
)
from ddprobe.store import RunRecord

_KEY = re.compile(r"^b(?P<budget>\d{1,9})-(?P<graph>graph|eager)(?:-bs(?P<bs>\d{1,9}))?"
                  r"(?:-(?P<rest>[^+#]*?))?(?P<suffix>(?:\+[^#]*)?)(?:#(?P<rep>\d{1,9}))?$")


def _verdict_line(v: Verdict) -> str:
    what = ""
    if v.buffer and v.buffer.get("attr"):
        what = f": {v.buffer['attr']} at {v.buffer.get('where') or v.buffer.get('file')}"
    elif v.buffer and v.buffer.get("attrs"):
        what = ": " + ", ".join(v.buffer["attrs"])
    host = f" [{v.host}]" if v.host else ""
    return (f"# verdict{host}: {','.join(f'b{b}' for b in v.budgets)} {v.label} "
            f"({v.decided_by}, {v.confidence}){what}")


def render_log(rec: RunRecord) -> str:
    """The replayable session log of a bisect run."""
    if rec.meta.get("command") not in ("bisect", None):
        raise ConfigError(f"run {rec.run_id} is a {rec.meta.get('command')} run, not a bisect",
                          key="RUN_ID")
    groups: dict[str, list[CellResult]] = {}
    for c in rec.cells:
        if isinstance(c.plan, dict):
            groups.setdefault(str(c.group or ""), []).append(c)
    out = [f"# ddprobe bisect log: run {rec.run_id}, started {rec.meta.get('started_at', '?')}"]
    out += [f"# note: {n}" for n in rec.notes]
    for cells in (groups or {"": []}).values():
        out += _group_lines(rec, cells, several=len(groups) != 1)
    if rec.end:
        out.append(f"# restarts: {rec.end.get('restarts_used')} "
                   f"(full sweep: {rec.end.get('restarts_full_sweep')}), rounds "
                   f"{rec.end.get('rounds')}, status {rec.end.get('status')}")
    else:
        out.append("# (unfinished: `ddprobe bisect --resume " + rec.run_id + "` continues it)")
    return "\n".join(out) + "\n"


def _group_lines(rec: RunRecord, cells: Sequence[CellResult], *, several: bool) -> list[str]:
    """One group's session: its start line, a mark per cell, its first bad config and the
    verdicts about its hosts (every verdict when the run has a single group)."""
    hosts = sorted({c.host for c in cells}) or list(rec.meta.get("hosts") or [])
    out = [shlex.join(_start_words(rec, cells, hosts))]
    for c in cells:
        out += _mark_lines(c, shown_host=len(hosts) > 1)
    first_bad = _first_bad(cells)
    if first_bad is not None:
        out.append(f"# first bad config: [{first_bad.config.key}] {describe(first_bad)}")
    host_names = set(hosts)
    out += [_verdict_line(v) for v in rec.verdicts
            if v.host is None or set(v.host.split(",")) <= host_names or not several]
    return out


_START_FLAGS: Final = (("--max-bs", "max_bs"), ("--backend", "backend"), ("--repeat", "repeat"),
                       ("--order", "order"), ("--confirm-patch", "confirm_patch"),
                       ("--oversize-factor", "oversize_factor"))
# a start option at its default is left out of the line (the line `bisect start` would take)
_START_DEFAULTS: Final = {"repeat": 1, "order": "auto", "oversize_factor": OVERSIZE_FACTOR}


def _start_words(rec: RunRecord, cells: Sequence[CellResult], hosts: list[str]) -> list[str]:
    opts = rec.meta.get("options") or {}
    start = ["ddprobe", "bisect", "start", "--host", ",".join(hosts),
             "--budgets", ",".join(str(b) for b in opts.get("budgets") or
                                   rec.meta.get("budgets") or [])]
    for flag, key in _START_FLAGS:
        val = opts.get(key)
        if val not in (None, "", _START_DEFAULTS.get(key)):
            start += [flag, str(val)]
    small = _small_max_bs(cells)
    if small is not None:
        start += ["--small-max-bs", str(small)]
    for sus in _suspects_of(cells, rec):
        start += ["--suspect", sus]
    return start


def _mark_lines(c: CellResult, *, shown_host: bool) -> list[str]:
    """`# term: [key] what it saw` and the mark command that replays it."""
    key = _plan(c).get("key") or c.config.key
    st = status_of(c)
    term = {GOOD: "good", BAD: "bad", REFUSED: "skip"}.get(st, "skip")
    comment = f"# {term}: [{key}] {describe(c)}" + (f" (on {c.host})" if shown_host else "")
    cmd = ["ddprobe", "bisect", term, key]
    bufs = list(_plan(c).get("buffers") or [])
    if bufs and ",".join(bufs) not in key:  # the key abbreviates a long buffer list
        cmd += ["--oversize", ",".join(bufs)]
    if st == BAD:
        cmd += ["--mode", _mode_arg(c)]
    elif st == REFUSED:
        cmd += ["--refused", c.error or "refused"]
    return [comment, shlex.join(cmd)]


def _plan(c: CellResult) -> dict[str, Any]:
    """The planned cell's record (render_log keeps only the cells that carry one)."""
    return c.plan or {}


def _mode_arg(c: CellResult) -> str:
    sig = c.signature
    if sig is None:
        return c.outcome.value
    return f"{c.outcome.value} {sig.kind}: {sig.key}"


def _suspects_of(cells: Sequence[CellResult], rec: RunRecord | None = None) -> list[str]:
    """The full suspect list as `ATTR@FILE:LINE` (the buffers of the largest oversize cell,
    located from the verdicts' static evidence), so a replay keeps file:line."""
    best: list[str] = []
    for c in cells:
        bufs = list(_plan(c).get("buffers") or [])
        if len(bufs) > len(best):
            best = bufs
    where: dict[str, str] = {}
    for v in (rec.verdicts if rec is not None else []):
        for e in v.evidence:
            for b in e.details.get("buffers") or []:
                if isinstance(b, dict) and b.get("attr") and b.get("file"):
                    where[b["attr"]] = f"{b['file']}:{b['line']}" if b.get("line") else b["file"]
        if v.buffer and v.buffer.get("attr") and v.buffer.get("file"):
            b = v.buffer
            where[b["attr"]] = f"{b['file']}:{b['line']}" if b.get("line") else b["file"]
    return [f"{a}@{where[a]}" if a in where else a for a in best]


def format_suspect(s: Suspect) -> str:
    return f"{s.attr}@{s.where}" if s.file and s.file != "?" else s.attr


def parse_suspect(text: str) -> Suspect:
    """`ATTR[@FILE[:LINE]]` (the session log's form) -> a Suspect."""
    attr, _, loc = text.partition("@")
    file, _, line = loc.rpartition(":") if ":" in loc else (loc, "", "")
    return Suspect(attr=attr.strip(), file=file or "?",
                   line=int(line) if line.isdecimal() and len(line) <= 9 else None, shape="?",
                   scope="", flags=(), tier=1)


def _small_max_bs(cells: Sequence[CellResult]) -> int | None:
    for c in cells:
        if _plan(c).get("purpose") == "max_bs":
            return c.config.max_bs
    return None


def _first_bad(cells: Sequence[CellResult]) -> CellResult | None:
    bad = [c for c in cells if _plan(c).get("purpose") == "frontier"
           and status_of(c) == BAD and c.config.graph]
    return min(bad, key=lambda c: c.config.budget) if bad else None


# ----- replay ---------------------------------------------------------------------------------

@dataclass
class Session:
    hosts: str
    spec: BisectSpec
    marks: list[tuple[PlannedCell, CellResult]] = field(default_factory=list)


def parse_key(key: str, line: int, path: str) -> tuple[Config, tuple[str, ...], str | None,
                                                          bool, int]:
    m = _KEY.match(key)
    if not m:
        raise ConfigError(f"not a cell key: {key!r}", path=path, line=line)
    rest = m.group("rest") or ""
    backend = None
    if rest and not re.fullmatch(r"x[0-9a-f]{6}", rest):
        backend = rest.split("-x")[0]
    cfg = Config(budget=int(m.group("budget")), graph=m.group("graph") == "graph",
                 max_bs=int(m.group("bs")) if m.group("bs") else None, backend=backend)
    suffix = m.group("suffix") or ""
    bufs: tuple[str, ...] = ()
    patch = None
    mo = re.search(r"\+oversize\[([^\]]*)\]", suffix)
    if mo:
        bufs = tuple(x for x in mo.group(1).split(",") if x)
    mp = re.search(r"\+patch\[([^\]]*)\]", suffix)
    if mp:
        patch = mp.group(1)
    return cfg, bufs, patch, "+sanitize" in suffix, int(m.group("rep") or 1)


def _mode_result(cfg: Config, mode: str) -> CellResult:
    outcome, _, rest = mode.partition(" ")
    try:
        out = Outcome(outcome)
    except ValueError:
        out = Outcome.CRASH
        rest = mode
    sig = None
    if rest:
        kind, _, key = rest.partition(": ")
        sig = Signature(kind=kind, key=key)
    return CellResult(host="replay", config=cfg, outcome=out, signature=sig,
                      timings={"restart": 0.0})


START_OPTS = {"--host": str, "--budgets": str, "--max-bs": int, "--backend": str,
              "--repeat": int, "--order": str, "--confirm-patch": str, "--small-max-bs": int,
              "--oversize-factor": int,
              "--suspects": str, "--suspect": list}
MARK_OPTS = {"--graph": bool, "--no-graph": bool, "--max-bs": int, "--backend": str,
             "--oversize": str, "--patch": str, "--mode": str, "--refused": str}
Mark = Literal["good", "bad", "skip"]  # what a manual mark says of a cell
VERBS: Final[tuple[Mark, ...]] = get_args(Mark)


def parse_opts(args: Sequence[str], known: dict[str, type], path: str, line: int | None
               ) -> tuple[dict[str, Any], list[str]]:
    """`--opt value` words (and bare `--flag`s, `--opt=value`) -> (options, positionals)."""
    opts: dict[str, Any] = {}
    pos: list[str] = []
    it = iter(args)
    for w in it:
        if not w.startswith("--"):
            pos.append(w)
            continue
        name, eq, val = w.partition("=")
        kind = known.get(name)
        if kind is None:
            raise ConfigError(f"unknown option {name} (known: {', '.join(known)})", path=path,
                              line=line)
        if kind is bool:
            opts[name] = True
            continue
        if not eq:
            nxt = next(it, None)
            if nxt is None:
                raise ConfigError(f"{name} needs a value", path=path, line=line)
            val = nxt
        if kind is int:
            try:
                opts[name] = int(val)
            except ValueError:
                raise ConfigError(f"{name}: expected an integer, got {val!r}", path=path,
                                  line=line) from None
        elif kind is list:
            opts.setdefault(name, [])
            opts[name].append(val)
        else:
            opts[name] = val
    return opts, pos


def mark_cell(spec: BisectSpec, target: str, opt: dict[str, Any], path: str,
              line: int | None) -> tuple[PlannedCell, bool]:
    """The planned cell a mark names: a cell key (`b16-graph-bs64+oversize[x]`) or a budget
    with --graph/--no-graph, --max-bs, --backend, --oversize, --patch. -> (cell, sanitize)."""
    if target.isdecimal() and len(target) <= 9:  # a longer one is no cell key either
        cfg, bufs, patch, san, rep = _budget_target(spec, int(target), opt, path, line)
    else:
        cfg, bufs, patch, san, rep = parse_key(target, line or 0, path)
    if "--oversize" in opt:
        bufs = tuple(x for x in str(opt["--oversize"]).split(",") if x)
    if cfg.budget not in spec.budgets:
        raise ConfigError(f"budget {cfg.budget} is not one of this bisect's budgets "
                          f"({','.join(map(str, spec.budgets))})", path=path, line=line)
    mf = re.search(r"\+oversize\[[^\]]*\]x(\d+)", target)  # an escalated oversize factor
    factor = int(mf.group(1)) if mf and bufs else None
    return PlannedCell(cfg, _purpose(spec, cfg, bufs, patch, san), buffers=bufs, patch=patch,
                       rep=rep, factor=factor), san


def _budget_target(spec: BisectSpec, budget: int, opt: dict[str, Any], path: str,
                   line: int | None) -> tuple[Config, tuple[str, ...], str | None, bool, int]:
    """A mark that names a budget: its config from the session's base and the options."""
    if opt.get("--graph") and opt.get("--no-graph"):
        raise ConfigError("--graph and --no-graph exclude each other", path=path, line=line)
    cfg = replace(spec.base, budget=budget, graph=not opt.get("--no-graph"))
    if "--max-bs" in opt:
        cfg = replace(cfg, max_bs=int(opt["--max-bs"]))
    if "--backend" in opt:
        cfg = replace(cfg, backend=str(opt["--backend"]) or None)
    patch = str(opt["--patch"]) if "--patch" in opt else None
    return cfg, (), patch, False, 1


def _purpose(spec: BisectSpec, cfg: Config, bufs: tuple[str, ...], patch: str | None,
             san: bool) -> Purpose:
    if san:
        return "sanitize"
    if patch:
        return "confirm"
    if bufs:
        return "oversize"
    if cfg.graph and cfg.max_bs == spec.base.max_bs:
        return "frontier"
    return "eager" if not cfg.graph else "max_bs"


def mark_result(verb: Mark, cell: PlannedCell, opt: dict[str, Any]) -> CellResult:
    cfg = cell.config
    if verb == "good":
        return CellResult(host="replay", config=cfg, outcome=Outcome.OK,
                          timings={"restart": 0.0})
    if verb == "bad":
        return _mode_result(cfg, str(opt.get("--mode") or "crash"))
    if "--refused" in opt:
        return CellResult(host="replay", config=cfg, outcome=Outcome.REFUSED,
                          error=str(opt["--refused"]))
    return CellResult(host="replay", config=cfg, outcome=Outcome.ERROR, error="skipped")


def parse_log(text: str, path: str = "<log>") -> list[Session]:
    sessions: list[Session] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line)
        except ValueError as e:
            raise ConfigError(f"cannot parse: {e}", path=path, line=n) from None
        if words[:2] != ["ddprobe", "bisect"] or len(words) < 3:
            raise ConfigError(f"not a `ddprobe bisect` command: {line!r}", path=path, line=n)
        verb, args = words[2], words[3:]
        if verb == "start":
            sessions.append(_start(args, path, n))
            continue
        if not sessions:
            raise ConfigError("a mark before `ddprobe bisect start`", path=path, line=n)
        if verb not in VERBS:
            raise ConfigError(f"unknown command {verb!r} (start, good, bad, skip)", path=path,
                              line=n)
        opt, pos = parse_opts(args, MARK_OPTS, path, n)
        if len(pos) != 1:
            raise ConfigError(f"`{verb}` takes one cell (a budget or a cell key), got "
                              f"{len(pos)}", path=path, line=n)
        cell, _ = mark_cell(sessions[-1].spec, pos[0], opt, path, n)
        sessions[-1].marks.append((cell, mark_result(verb, cell, opt)))
    if not sessions:
        raise ConfigError("no `ddprobe bisect start` line", path=path)
    return sessions


def _start(args: list[str], path: str, line: int) -> Session:
    opt, pos = parse_opts(args, START_OPTS, path, line)
    if pos:
        raise ConfigError(f"`start` takes options only, got {pos[0]!r}", path=path, line=line)
    if "--budgets" not in opt:
        raise ConfigError("`start` needs --budgets (e.g. --budgets 8,16,32,64)", path=path,
                          line=line)
    try:  # the command line's rules (ddprobe/intlist.py)
        budgets = budget_set(parse_ints(str(opt["--budgets"])))
    except IntListError as e:
        raise ConfigError(f"--budgets: {e}", path=path, line=line) from None
    names = [x for x in str(opt.get("--suspects", "")).split(",") if x]
    names += list(opt.get("--suspect", []))
    sus = tuple(parse_suspect(a) for a in names)
    base = Config(budget=budgets[0], max_bs=opt.get("--max-bs"), backend=opt.get("--backend"))
    try:
        opts = PlanOptions(order=known(Order, str(opt.get("--order", "auto")), "order"),
                           repeat=int(opt.get("--repeat", 1)),
                           confirm_patch=opt.get("--confirm-patch"),
                           oversize_factor=int(opt.get("--oversize-factor", OVERSIZE_FACTOR)),
                           # a session log's good/bad carry no answers to compare
                           agreement=AgreementOptions(enabled=False, off_reason=MANUAL_OFF))
        spec = BisectSpec(budgets, base, int(opt.get("--small-max-bs", DEFAULT_SMALL_MAX_BS)),
                          sus, opts)
    except (DdprobeError, UnknownValue) as e:
        raise ConfigError(str(e), path=path, line=line) from None
    return Session(str(opt.get("--host", "?")), spec)


def replay(text: str, path: str = "<log>") -> list[tuple[Session, Planner, list[Verdict]]]:
    """Re-derive each session's verdicts from its marks (no host is touched)."""
    out = []
    for s in parse_log(text, path):
        p = Planner(s.spec)
        for cell, res in s.marks:
            p.record(cell, res)
        out.append((s, p, build_verdicts(p, host=s.hosts)))
    return out

