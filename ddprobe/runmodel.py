"""One model of a run, built from its journal: what bisect, sweep and smoke return and what
every renderer draws from (the terminal, the files and JUnit alike), so no two views of a run
can drift.

    model = load_model(run_dir)            # = build_model(load_run(run_dir))
    model.verdicts, model.matrices, model.groups, model.sweep_rows, model.smoke

Pure: `build_model(rec)` reads a `RunRecord` and returns frozen data; nothing here formats text
(a leaf: it imports results, store and untrusted only). What a bisect or sweep knew at its
end beyond its cells and verdicts (per group: rounds, restarts, suspects, when each verdict
became final; a sweep's table; a smoke check's hosts and cases) is in the journal's end entry,
read back here.
Several cells can share a budget and a graph mode (repeats, a max-bs experiment, an oversize or
confirm patch): the matrix shows the cells of the run's base config there and lists the others
as variants, so a patched re-run never hides the failure it was run to explain.
"""
from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddprobe.results import CellKind, CellResult, Outcome, Verdict
from ddprobe.store import RunRecord, load_run

MODES: tuple[str, ...] = ("graph", "eager")
_BAD = {o.value for o in Outcome if o.bad}


@dataclass(frozen=True)
class CellView:
    index: int  # position in the journal (1-based)
    key: str
    host: str
    budget: int
    graph: bool
    max_bs: int | None
    backend: str | None
    outcome: str
    signature: str | None
    signature_kind: str | None
    accept: float | None
    tok_s: float | None
    passed: int | None
    total: int | None
    restart_s: float | None
    total_s: float | None
    error: str | None
    patches: tuple[str, ...]
    kind: CellKind
    variant: str  # "" for the run's base config, else what differs ("max bs 32", "patch X")
    plan_key: str = ""  # the planner's key (`b16-graph+oversize[x]`), which evidence cites
    launch: tuple[str, ...] = ()  # the argv the server was started with
    effective: tuple[tuple[str, str], ...] = ()  # what the server said it runs (field, value)
    effective_source: str = ""
    log: str = ""  # a bounded, cleaned excerpt of the cell's server log (failing cells)

    @property
    def failed(self) -> bool:
        return self.outcome != "ok"

    @property
    def mode(self) -> str:
        return "graph" if self.graph else "eager"

    @property
    def coding(self) -> str:
        return f"{self.passed}/{self.total}" if self.total else ""


@dataclass(frozen=True)
class MatrixEntry:
    host: str
    budget: int
    mode: str
    outcome: str  # an Outcome value, "flaky" (repeats disagree) or "not-run"
    cells: tuple[CellView, ...]  # the base-config cells behind `outcome`
    variants: tuple[CellView, ...]  # other cells at this budget and mode
    accept: float | None = None
    tok_s: float | None = None
    coding: str = ""
    signature: str | None = None


@dataclass(frozen=True)
class HostMatrix:
    host: str
    budgets: tuple[int, ...]
    modes: tuple[str, ...]
    entries: tuple[MatrixEntry, ...]

    def get(self, budget: int, mode: str) -> MatrixEntry:
        for e in self.entries:
            if e.budget == budget and e.mode == mode:
                return e
        return MatrixEntry(self.host, budget, mode, "not-run", (), ())


@dataclass(frozen=True)
class Point:
    budget: int
    value: float | None
    outcome: str


@dataclass(frozen=True)
class Series:
    name: str
    mode: str
    points: tuple[Point, ...]


@dataclass(frozen=True)
class GroupView:
    """One group of identical hosts of a bisect, as its end entry recorded it."""

    key: str
    name: str
    hosts: tuple[str, ...]
    identity: dict[str, Any]
    rounds: int
    restarts: int  # every restart of the group (resumed cells included)
    restarts_now: int  # restarts made by the invocation that wrote the end
    full_sweep: int
    suspects: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]
    patch_kept: bool | None
    finals: tuple[dict[str, Any], ...]  # when each verdict became final (bisect/streaming.py)
    cells: tuple[CellResult, ...]  # the group's cells, journal order (superseded errors out)


@dataclass(frozen=True)
class SweepRow:
    """One row of a sweep's table: a group, a budget, a summary per variant."""

    group: str
    budget: int
    entries: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class SmokeCase:
    """One JUnit test case of a smoke check: pass | failure | error | skipped."""

    name: str
    classname: str
    status: str = "pass"
    message: str = ""
    type: str = ""
    time: float = 0.0
    output: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SmokeHost:
    """One host of a smoke check, as its end entry recorded it (its cells from the journal)."""

    host: str
    cases: tuple[SmokeCase, ...]
    exit_code: int
    properties: dict[str, str]
    time: float
    timestamp: str
    cells: tuple[CellResult, ...]


@dataclass(frozen=True)
class SmokeRun:
    """A smoke check: what its terminal table, its JUnit XML and `smoke --json` draw."""

    run_id: str
    run_dir: Path
    hosts: tuple[SmokeHost, ...]
    wall_s: float
    exit_code: int


@dataclass(frozen=True)
class RunModel:
    run_id: str
    command: str
    hosts: tuple[str, ...]
    budgets: tuple[int, ...]
    started_at: str
    finished_at: str | None
    exit_code: int | None
    restarts_used: int
    restarts_full_sweep: int | None
    cells: tuple[CellView, ...]
    matrices: tuple[HostMatrix, ...]
    verdicts: tuple[Verdict, ...]
    notes: tuple[str, ...]
    accept_series: tuple[Series, ...]
    tok_series: tuple[Series, ...]
    disagreements: tuple[str, ...]
    counts: tuple[tuple[str, int], ...]
    argv: tuple[str, ...] = ()
    record: RunRecord = field(default_factory=lambda: RunRecord("", Path(".")), repr=False)
    wall_s: float | None = None
    server_s: float | None = None
    status: str = ""  # a bisect's RunStatus
    rounds: int = 0
    restarts_now: int = 0  # restarts made by the invocation that wrote the end
    infra_errors: int = 0
    groups: tuple[GroupView, ...] = ()
    disagreement_details: tuple[dict[str, Any], ...] = ()  # budget, per_group, why, text
    run_notes: tuple[str, ...] = ()  # the notes of opening the hosts (not every journal note)
    sweep_variants: tuple[str, ...] = ()
    sweep_rows: tuple[SweepRow, ...] = ()
    smoke: SmokeRun | None = None  # a smoke check's hosts and cases

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    @property
    def run_dir(self) -> Path:
        return self.record.dir

    @property
    def budgets_asked(self) -> tuple[int, ...]:
        """The budgets the run was asked for (its header), not every budget a cell ran."""
        return tuple(int(b) for b in self.record.meta.get("budgets") or ())

    @property
    def results(self) -> tuple[CellResult, ...]:
        """The run's cells as results, superseded infrastructure errors left out."""
        return tuple(c for g in self.groups for c in g.cells) if self.groups else \
            current_cells(self.record)

    @property
    def errored(self) -> int:
        """Cells that ended in an infrastructure error: the run is incomplete."""
        return sum(1 for c in self.results if c.outcome is Outcome.ERROR)

    def cells_of(self, keys: Sequence[str], host: str | None = None) -> list[CellView]:
        """The cells an evidence line cites (by planner key or config key)."""
        hosts = set((host or "").split(",")) - {""}
        return [c for c in self.cells if (c.plan_key in keys or c.key in keys)
                and (not hosts or c.host in hosts)]

    def cited_by(self, cell: CellView) -> list[int]:
        """The numbers (1-based, in report order) of the verdicts whose evidence cites a cell."""
        out = []
        for n, v in enumerate(self.verdicts, 1):
            keys = [k for e in v.evidence for k in e.cells]
            if cell in self.cells_of(keys, v.host):
                out.append(n)
        return out


def _variation(c: CellResult, common_bs: int | None) -> tuple[int, str]:
    """How far a cell is from the run's base config, and the words for the difference."""
    parts: list[str] = []
    if c.config.max_bs is not None and c.config.max_bs != common_bs:
        parts.append(f"max bs {c.config.max_bs}")
    if c.patches:
        parts.append("patch " + ", ".join(c.patches))
    if c.config.extra_args:
        parts.append("args " + " ".join(c.config.extra_args))
    if c.config.env:
        parts.append("env " + " ".join(f"{k}={v}" for k, v in c.config.env))
    if c.kind != "cell":
        parts.append(c.kind)
    return len(parts), "; ".join(parts)


LOG_LINES, LOG_CHARS = 40, 4000  # the server-log excerpt of a failing cell in a report


def _log_excerpt(c: CellResult, run_dir: Any) -> str:
    """The tail of a failing cell's server log: the copy in the run directory, else the lines
    the journal kept; bounded and cleaned (host text)."""
    from pathlib import Path

    from ddprobe.untrusted import excerpt
    if c.outcome is Outcome.OK:
        return ""
    text = ""
    if run_dir is not None:
        key = (c.plan or {}).get("key") or c.config.key
        f = Path(run_dir) / "logs" / f"{c.host}-{key}.log"
        try:
            with f.open("rb") as fh:
                fh.seek(0, 2)
                fh.seek(max(0, fh.tell() - 64 * 1024))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            text = ""
    if not text and c.log_excerpt:
        text = "\n".join(str(x) for x in c.log_excerpt)
    return excerpt(text, max_chars=LOG_CHARS, max_lines=LOG_LINES) if text else ""


def _effective(c: CellResult) -> tuple[tuple[str, str], ...]:
    e = c.effective
    if e is None:
        return ()
    out = []
    for k, v in e.to_dict().items():
        if k in ("source", "fields_from_log") or v is None or v == [] or v == ():
            continue
        out.append((k, ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)))
    return tuple(out)


def _view(i: int, c: CellResult, variant: str, run_dir: Any = None) -> CellView:
    p = c.probes
    return CellView(
        index=i, key=c.config.key, host=c.host, budget=c.config.budget, graph=c.config.graph,
        max_bs=c.config.max_bs, backend=c.config.backend, outcome=c.outcome.value,
        signature=c.signature.id if c.signature else None,
        signature_kind=c.signature.kind if c.signature else None,
        accept=p.accept_length if p else None, tok_s=p.tok_s if p else None,
        passed=p.passed if p else None, total=p.total if p else None,
        restart_s=_num(c.timings.get("restart")), total_s=_num(c.timings.get("total")),
        error=c.error, patches=tuple(c.patches), kind=c.kind, variant=variant,
        plan_key=str((c.plan or {}).get("key") or c.config.key),
        launch=tuple(str(a) for a in c.launch or ()), effective=_effective(c),
        effective_source=c.effective.source if c.effective else "",
        log=_log_excerpt(c, run_dir))


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _mean(vals: Sequence[float | None]) -> float | None:
    got = [v for v in vals if v is not None]
    return round(statistics.fmean(got), 3) if got else None


def _combine(cells: Sequence[CellView]) -> str:
    """One outcome for the repeats of a config; repeats that disagree (ok vs bad) are flaky."""
    real = [c.outcome for c in cells if c.outcome != "error"] or [c.outcome for c in cells]
    kinds = set(real)
    if len(kinds) == 1:
        return real[0]
    if kinds & _BAD and "ok" in kinds:
        return "flaky"
    return Counter(real).most_common(1)[0][0]


def _entry(host: str, budget: int, mode: str, views: Sequence[CellView]) -> MatrixEntry:
    base = [v for v in views if not v.variant]
    if not base:  # only variants ran here: show the least varied one as the cell
        least = min(len(v.variant.split(";")) for v in views)
        base = [v for v in views if len(v.variant.split(";")) == least][:1]
    rest = tuple(v for v in views if v not in base)
    outcome = _combine(base)
    sig = next((v.signature for v in base if v.signature), None)
    totals = [(v.passed or 0, v.total or 0) for v in base if v.total]
    coding = f"{sum(p for p, _ in totals)}/{sum(t for _, t in totals)}" if totals else ""
    return MatrixEntry(host, budget, mode, outcome, tuple(base), rest,
                       accept=_mean([v.accept for v in base]), tok_s=_mean([v.tok_s for v in base]),
                       coding=coding, signature=sig)


def _budgets(rec: RunRecord) -> list[int]:
    got = {c.config.budget for c in rec.cells}
    for b in rec.meta.get("budgets") or []:
        try:
            got.add(int(b))
        except (TypeError, ValueError):
            continue
    return sorted(got)


def build_model(rec: RunRecord) -> RunModel:
    """Everything a renderer needs, computed once from the run record."""
    views = _views(rec)
    hosts = list(dict.fromkeys([v.host for v in views] + list(_strs(rec.meta.get("hosts")))))
    budgets = _budgets(rec)
    matrices = _matrices(views, hosts, budgets)
    end = rec.end or {}
    used = end.get("restarts_used")
    return RunModel(
        run_id=rec.run_id, command=str(rec.meta.get("command") or ""), hosts=tuple(hosts),
        budgets=tuple(budgets), started_at=str(rec.meta.get("started_at") or ""),
        finished_at=_finished_at(rec), exit_code=end.get("exit_code"),
        restarts_used=int(used) if isinstance(used, int) else rec.restarts_used,
        restarts_full_sweep=end.get("restarts_full_sweep"),
        cells=tuple(views), matrices=tuple(matrices), verdicts=tuple(rec.verdicts),
        notes=tuple(rec.notes), accept_series=_series(matrices, "accept"),
        tok_series=_series(matrices, "tok_s"), disagreements=_disagreements(matrices),
        counts=tuple(sorted(Counter(v.outcome for v in views).items())),
        argv=_strs(rec.meta.get("argv")), record=rec,
        wall_s=_num(end.get("wall_s")), server_s=_num(end.get("server_s")),
        status=str(end.get("status") or ""), rounds=_int(end.get("rounds")),
        restarts_now=_int(end.get("restarts_this_invocation", used)),
        infra_errors=_int(end.get("infra_errors")), groups=_groups(rec),
        disagreement_details=_dicts(end.get("disagreement_details")),
        run_notes=_strs(end.get("run_notes")), sweep_variants=_strs(end.get("variants")),
        sweep_rows=tuple(SweepRow(str(r.get("group", "")), _int(r.get("budget")),
                                  dict(r.get("entries") or {}))
                         for r in _dicts(end.get("rows"))),
        smoke=_smoke(rec))


def _strs(xs: Any) -> tuple[str, ...]:
    """A journal's list as strings (missing or null: none)."""
    return tuple(str(x) for x in xs or ())


def _dicts(xs: Any) -> tuple[dict[str, Any], ...]:
    """The objects of a journal's list (missing or null: none; other entries left out)."""
    return tuple(x for x in xs or () if isinstance(x, dict))


def load_model(run_dir: Path) -> RunModel:
    """The model of the run in `run_dir`, from its journal."""
    return build_model(load_run(run_dir))


def current_cells(rec: RunRecord) -> tuple[CellResult, ...]:
    """The journal's cells but those a resumed run replaced: an infrastructure error is run
    again on `--resume`, and the later cell of the same group and plan key stands for it."""
    cells = list(rec.cells)
    out = []
    for i, c in enumerate(cells):
        if c.outcome is Outcome.ERROR and any(
                later.group == c.group and _plan_key(later) == _plan_key(c)
                for later in cells[i + 1:]):
            continue
        out.append(c)
    return tuple(out)


def _plan_key(c: CellResult) -> str:
    return str((c.plan or {}).get("key") or c.config.key)


def _groups(rec: RunRecord) -> tuple[GroupView, ...]:
    """A bisect's groups, as its end entry recorded them, with their cells from the journal."""
    cells = current_cells(rec)
    out = []
    for g in (rec.end or {}).get("groups") or ():
        if not isinstance(g, dict):
            continue
        key = str(g.get("key", ""))
        out.append(GroupView(
            key=key, name=str(g.get("name", "")), hosts=tuple(g.get("hosts") or ()),
            identity=dict(g.get("identity") or {}), rounds=_int(g.get("rounds")),
            restarts=_int(g.get("restarts")),
            restarts_now=_int(g.get("restarts_this_invocation")),
            full_sweep=_int(g.get("restarts_full_sweep")),
            suspects=tuple(g.get("suspects") or ()), notes=tuple(g.get("notes") or ()),
            patch_kept=g.get("patch_kept"), finals=tuple(g.get("verdicts_final") or ()),
            cells=tuple(c for c in cells if c.group == key)))
    return tuple(out)


def _smoke(rec: RunRecord) -> SmokeRun | None:
    """A smoke check's hosts and their cases, from its end entry (None for another run)."""
    end = rec.end or {}
    if "smoke_hosts" not in end:
        return None
    fields = SmokeCase.__dataclass_fields__
    hosts = []
    for h in end.get("smoke_hosts") or ():
        if not isinstance(h, dict):
            continue
        name = str(h.get("host", ""))
        cases = tuple(SmokeCase(**{k: v for k, v in c.items() if k in fields})
                      for c in h.get("cases") or () if isinstance(c, dict))
        hosts.append(SmokeHost(name, cases, _int(h.get("exit_code")),
                               {str(k): str(v) for k, v in (h.get("properties") or {}).items()},
                               _num(h.get("time")) or 0.0, str(h.get("timestamp") or ""),
                               tuple(c for c in rec.cells if c.host == name)))
    return SmokeRun(rec.run_id, rec.dir, tuple(hosts), _num(end.get("wall_s")) or 0.0,
                    _int(end.get("exit_code")))


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _views(rec: RunRecord) -> list[CellView]:
    """One view per cell, its variation named against the run's most common max bs."""
    plain = [c for c in rec.cells if not c.patches and c.kind == "cell"]
    bs_counts = Counter(c.config.max_bs for c in plain or rec.cells)
    common_bs = bs_counts.most_common(1)[0][0] if bs_counts else None
    return [_view(i, c, _variation(c, common_bs)[1], getattr(rec, "dir", None))
            for i, c in enumerate(rec.cells, 1)]


def _matrices(views: Sequence[CellView], hosts: Sequence[str],
              budgets: Sequence[int]) -> list[HostMatrix]:
    """A budget x mode grid per host; no cells (a playbook of static steps): no grid."""
    if not views:
        return []
    modes = tuple(m for m in MODES if any(v.mode == m for v in views)) or ("graph",)
    matrices = []
    for h in hosts:
        entries = []
        for b in budgets:
            for m in modes:
                here = [v for v in views if v.host == h and v.budget == b and v.mode == m]
                if here:
                    entries.append(_entry(h, b, m, here))
        matrices.append(HostMatrix(h, tuple(budgets), modes, tuple(entries)))
    return matrices


def _finished_at(rec: RunRecord) -> str | None:
    """The end's time; '' for an end without one; None for an unfinished run."""
    end = rec.end or {}
    if end.get("finished_at"):
        return str(end["finished_at"])
    return "" if rec.end is not None else None


def _series(matrices: Sequence[HostMatrix], metric: str) -> tuple[Series, ...]:
    out = []
    for hm in matrices:
        for m in hm.modes:
            pts = []
            for b in hm.budgets:
                e = hm.get(b, m)
                pts.append(Point(b, getattr(e, metric), e.outcome))
            if any(p.outcome != "not-run" for p in pts):
                name = m if len(matrices) == 1 else f"{hm.host} {m}"
                out.append(Series(name, m, tuple(pts)))
    return tuple(out)


def _disagreements(matrices: Sequence[HostMatrix]) -> tuple[str, ...]:
    """Where hosts that ran the same cell disagree (architecture-specific behaviour)."""
    if len(matrices) < 2:
        return ()
    out = []
    budgets = sorted({b for hm in matrices for b in hm.budgets})
    for b in budgets:
        for m in MODES:
            seen = {hm.host: hm.get(b, m).outcome for hm in matrices}
            ran = {h: o for h, o in seen.items() if o not in ("not-run", "error")}
            if len(set(ran.values())) > 1:
                out.append(f"b{b} {m}: " + ", ".join(f"{h} {o}" for h, o in ran.items()))
    return tuple(out)
