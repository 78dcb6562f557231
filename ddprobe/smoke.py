"""`ddprobe smoke`: a short fixed check for CI, with exit codes and a JUnit XML report.

Per host (hosts in parallel): facts -> flags check of the production config -> one cell with
CUDA graphs at the production budget (`server.budget`, or each of --budgets) -> probes.

Exit codes (ddprobe.exitcodes): 0 ok, 4 unreachable, 5 the server could not be started for
reasons outside the config (infrastructure), 7 refused config, 8 crash, 9 garbage, 10 degraded,
11 hang. With several hosts or budgets the most severe wins, in this order: crash, hang,
garbage, degraded, refused, server, unreachable.

JUnit (docs/notes/remote-and-ci.md section 5.2): one <testsuite> per host, test cases facts /
flags / cell / probes (per budget); a failed assertion about the server is <failure>, an
infrastructure problem (SSH, unreachable, server-start timeout) is <error>, a check that could
not run because an earlier one failed is <skipped>; <system-out> holds the server log's tail
and the suite's <properties> the package versions and GPU facts.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ddprobe.cell.classify import Baseline
from ddprobe.cell.experiment import ProbeOptions, run_cell
from ddprobe.errors import ConfigError, DdprobeError, RefusedError, RemoteError, UsageError
from ddprobe.exitcodes import ExitCode, for_outcome
from ddprobe.facts import Facts, gather_facts
from ddprobe.inventory import Host
from ddprobe.probes import differential
from ddprobe.remote import Remote, RemoteOptions, connect
from ddprobe.report import write_reports
from ddprobe.results import CellResult, Config, Outcome
from ddprobe.runmodel import RunModel, SmokeCase, load_model
from ddprobe.server.caches import RunCaches
from ddprobe.server.launch import build_launch, check_launch, deterministic_backends, host_flags
from ddprobe.store import RunStore, runs_root
from ddprobe.timestamps import utc_stamp
from ddprobe.untrusted import excerpt

if TYPE_CHECKING:  # the flags come from server.launch.host_flags
    from ddprobe.sources.flags import FlagSet

SEVERITY: Final = (ExitCode.CRASH, ExitCode.HANG, ExitCode.GARBAGE, ExitCode.DEGRADED,
                   ExitCode.REFUSED, ExitCode.SERVER, ExitCode.UNREACHABLE)
LOG_TAIL_LINES: Final = 80
LOG_TAIL_BYTES: Final = 64 << 10


@dataclass(frozen=True)
class SmokeRequest:
    """What `ddprobe smoke` (and a playbook's `smoke` step) asks for: the command line's
    options, parsed and checked (the task ids resolved, the baseline read) before a host is
    contacted."""

    budgets: tuple[int, ...] = ()  # none: each host's production budget (server.budget)
    probe: ProbeOptions | None = None  # None: the cell's default (the whole coding suite)
    baseline: Baseline | None = None  # a known-good cell: its tok/s, score and answers
    compare: bool = True  # the graph cell's greedy output against eager (or the baseline's)


@dataclass
class HostSmoke:
    """One host's smoke check as it runs (its cases are the run model's SmokeCase records,
    each built once it is decided)."""

    host: str
    cases: list[SmokeCase] = field(default_factory=list)
    exit_code: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    cells: list[CellResult] = field(default_factory=list)
    time: float = 0.0
    timestamp: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "exit_code": self.exit_code, "time": round(self.time, 3),
                "properties": self.properties, "cases": [c.to_dict() for c in self.cases],
                "cells": [c.to_dict() for c in self.cells]}


@dataclass
class SmokeReport:
    run_id: str
    run_dir: Path
    hosts: list[HostSmoke]
    wall_s: float

    @property
    def exit_code(self) -> int:
        return worst([h.exit_code for h in self.hosts])

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "run_dir": str(self.run_dir),
                "exit_code": self.exit_code, "wall_s": round(self.wall_s, 3),
                "hosts": [h.to_dict() for h in self.hosts]}


def worst(codes: Sequence[int]) -> int:
    bad = [c for c in codes if c != 0]
    if not bad:
        return 0
    rank = {int(c): i for i, c in enumerate(SEVERITY)}
    return min(bad, key=lambda c: rank.get(c, len(rank)))


def production_configs(host: Host, budgets: Sequence[int] = ()) -> list[Config]:
    s = host.server
    bs = list(budgets) or ([s.budget] if s.budget else [])
    if not bs:
        raise UsageError(f"host '{host.name}' has no production budget: set server.budget in "
                         "the inventory or pass --budgets")
    return [Config(budget=b, graph=True, max_bs=s.max_bs, backend=s.backend) for b in bs]


def _properties(host: Host, facts: Facts | None) -> dict[str, str]:
    props = {"host": host.name, "target": host.target, "package": host.package}
    if facts is None:
        return props
    if facts.install:
        props[f"{facts.install.get('name')}.version"] = str(facts.install.get("version"))
    for k, v in sorted(facts.packages.items()):
        props[f"package.{k}"] = v
    for i, g in enumerate(facts.gpus):
        props[f"gpu.{i}"] = f"{g.get('name')} ({g.get('sm') or g.get('compute_cap')})"
    for k in ("driver", "cuda", "os", "kernel", "hostname"):
        v = getattr(facts, k)
        if v:
            props[k] = str(v)
    props["python"] = str(facts.python.get("version", ""))
    return props


def _tail(c: CellResult) -> str:
    """The end of the cell's server log: bounded and cleaned (it goes into a CI artifact)."""
    path = c.local_log
    text = "\n".join(c.log_excerpt)
    if path:
        try:
            with open(path, "rb") as fh:  # only the end: a runaway log may be gigabytes
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - LOG_TAIL_BYTES))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            pass
    return excerpt(text, max_lines=LOG_TAIL_LINES, max_chars=LOG_TAIL_BYTES // 4)


def smoke_host(host: Host, configs: Sequence[Config], req: SmokeRequest, *,
               opts: RemoteOptions, caches: RunCaches, log_dir: Path | None,
               on_cell: Callable[[CellResult], None] | None = None) -> HostSmoke:
    """Run the smoke checks on one host (never raises for the host's own problems).
    `req.compare`: the graph cell's greedy output against eager (`differential b N` case)."""
    t0 = time.monotonic()
    hs = HostSmoke(host.name, timestamp=utc_stamp())
    cls = f"ddprobe.{host.name}"

    def unreachable(e: RemoteError, why: str) -> None:
        hs.cases.append(SmokeCase("facts", cls, "error", str(e), "unreachable"))
        for c in configs:
            for n in ("flags", "cell", "probes", *(("differential",) if req.compare else ())):
                hs.cases.append(SmokeCase(f"{n} b{c.budget}", f"{cls}.{c.key}", "skipped", why))
        hs.exit_code = int(ExitCode.UNREACHABLE)

    try:
        with connect(host, opts) as r:
            t = time.monotonic()
            try:
                facts = gather_facts(r, host)
            except RemoteError as e:
                unreachable(e, "facts failed")
                return hs
            hs.cases.append(_facts_case(host, facts, time.monotonic() - t))
            hs.properties = _properties(host, facts)
            flags, why = host_flags(r, host, cache=caches.flags)
            on = _OnHost(r, host, req, hs, caches, log_dir, on_cell)
            hs.exit_code = worst([_one(on, cfg, flags, why) for cfg in configs])
    except RemoteError as e:
        if not hs.cases:  # no facts yet: the host was never reached
            unreachable(e, "host unreachable")
        hs.exit_code = int(ExitCode.UNREACHABLE)
    finally:
        hs.time = time.monotonic() - t0
    return hs


def _facts_case(host: Host, facts: Facts, took: float) -> SmokeCase:
    cls = f"ddprobe.{host.name}"
    if facts.install is None:
        return SmokeCase("facts", cls, "failure", f"package {host.package!r} is not importable "
                         f"by {host.python}", "install", took)
    return SmokeCase("facts", cls, time=took)


@dataclass(frozen=True)
class _OnHost:
    """What every check on one connected host uses."""

    r: Remote
    host: Host
    req: SmokeRequest
    hs: HostSmoke
    caches: RunCaches
    log_dir: Path | None
    on_cell: Callable[[CellResult], None] | None

    def cell(self, cfg: Config, baseline: Baseline | None, *,
             keep_answers: bool = False) -> CellResult:
        """One cell (an infrastructure error is the cell's), kept and announced."""
        kw: dict[str, Any] = {"log_dir": self.log_dir, "caches": self.caches,
                              "keep_answers": keep_answers}
        if self.req.probe is not None:
            kw["probe"] = self.req.probe
        if baseline is not None:
            kw["baseline"] = baseline
        try:
            cell = run_cell(self.r, self.host, cfg, **kw)
        except DdprobeError as e:
            cell = CellResult(host=self.host.name, config=cfg, outcome=Outcome.ERROR,
                              error=str(e))
        self.hs.cells.append(cell)
        if self.on_cell is not None:
            self.on_cell(cell)
        return cell


def _one(on: _OnHost, cfg: Config, flags: FlagSet | None, why: str) -> int:
    """One production config: the flags check, the cell, its probes, and its greedy output
    against eager (four cases)."""
    cls = f"ddprobe.{on.host.name}.{cfg.key}"
    b = cfg.budget
    flags_case, stopped = _check_flags(SmokeCase(f"flags b{b}", cls), on.host, cfg, flags, why)
    if stopped is not None:
        code, reason = stopped
        on.hs.cases += [flags_case] + [
            SmokeCase(f"{n} b{b}", cls, "skipped", reason)
            for n in ("cell", "probes", *(("differential",) if on.req.compare else ()))]
        return code
    cell = on.cell(cfg, on.req.baseline, keep_answers=on.req.compare)
    diff_case = _differential(on, cfg, cell) if on.req.compare else None
    cases = _Cases(flags_case,
                   SmokeCase(f"cell b{b}", cls, time=float(cell.timings.get("restart", 0.0))
                             + float(cell.timings.get("health", 0.0)), output=_tail(cell)),
                   SmokeCase(f"probes b{b}", cls, time=float(cell.timings.get("probe", 0.0)),
                             output=_metrics(cell)))
    mark = _MARKS.get(cell.outcome)
    if mark is not None:
        cases = mark(cases, cell, cell.signature.id if cell.signature else "")
    on.hs.cases += [cases.flags, cases.cell, cases.probes, *([diff_case] if diff_case else [])]
    if cell.outcome is Outcome.ERROR:
        return int(ExitCode.SERVER)
    return int(for_outcome(cell.outcome))


def _check_flags(case: SmokeCase, host: Host, cfg: Config, flags: FlagSet | None, why: str
                 ) -> tuple[SmokeCase, tuple[int, str] | None]:
    """The flags case, and (exit code, why the rest is skipped) when the config cannot run."""
    t = time.monotonic()
    try:
        launch = build_launch(host, cfg, flags)
        if flags is None:
            case = replace(case, status="skipped", message=why or "flags not readable")
        else:
            check_launch(launch, flags)
            case = replace(case, output=" ".join(launch.server_args))
    except RefusedError as e:
        return (replace(case, status="failure", type="refused", message=str(e)),
                (int(ExitCode.REFUSED), "the flags check refused it"))
    except ConfigError as e:
        return (replace(case, status="error", type="config", message=str(e)),
                (int(ExitCode.CONFIG), "no launch command"))
    return replace(case, time=time.monotonic() - t), None


def _differential(on: _OnHost, cfg: Config, cell: CellResult) -> SmokeCase:
    """The graph cell's greedy output against eager at the same budget: a stored eager
    baseline's answers where one is given (the eager cell is paid once), else an eager cell
    now. A divergence makes the graph cell garbage; the case names the first diverging
    position."""
    case = SmokeCase(f"differential b{cfg.budget}", f"ddprobe.{on.host.name}.{cfg.key}")
    base = on.req.baseline
    texts = base.texts if base is not None else None
    # a baseline's answers may already have made the cell garbage (they differ): compare them
    if cell.outcome not in (Outcome.OK, Outcome.DEGRADED) and not (
            texts and cell.outcome is Outcome.GARBAGE and cell.answers):
        return replace(case, status="skipped", message=f"the graph cell is {cell.outcome.value}")
    t = time.monotonic()
    if base is not None and texts:
        eager = differential.Side(base.key or "baseline", texts=dict(texts), graph=False)
        d = differential.compare(differential.side_of(cell), eager, backends=deterministic_backends(
            on.r, on.host, cache=on.caches.flags))
        if d.status == differential.DIVERGED:
            differential.mark_garbage(cell, d)
    else:
        ec = on.cell(replace(cfg, graph=False), None, keep_answers=True)
        if ec.outcome is not Outcome.OK:
            return replace(case, status="error", type="eager",
                           message=f"the eager cell could not give a reference: "
                                   f"{ec.outcome.value}" + (f" ({ec.error})" if ec.error else ""))
        d = differential.apply(cell, ec, backends=deterministic_backends(
            on.r, on.host, cache=on.caches.flags))
    cover = differential.batch_coverage(cell)  # the graphs the comparison did not replay
    case = replace(case, time=time.monotonic() - t, output=d.summary + (
        f"; {cover[0]}" if cover and d.status == differential.SAME else ""))
    if d.status == differential.DIVERGED:
        return replace(case, status="failure", type="divergence", message=d.summary)
    if d.status == differential.INCOMPARABLE:
        return replace(case, status="skipped", message=d.summary)
    return case


def _metrics(cell: CellResult) -> str:
    p = cell.probes
    if p is None:
        return ""
    return f"{p.label}" + (f", accept {p.accept_length:.2f}" if p.accept_length else "") \
        + (f", {p.tok_s:.0f} tok/s" if p.tok_s else "")


@dataclass(frozen=True)
class _Cases:
    """The three cases of one config."""

    flags: SmokeCase
    cell: SmokeCase
    probes: SmokeCase


def _skipped(case: SmokeCase, why: str) -> SmokeCase:
    return replace(case, status="skipped", message=why)


def _mark_refused(c: _Cases, cell: CellResult, sig: str) -> _Cases:
    why = "the server refused the config"
    return _Cases(replace(c.flags, status="failure", type="refused",
                          message=cell.error or sig or "the server refused the flags"),
                  _skipped(c.cell, why), _skipped(c.probes, why))


def _mark_error(c: _Cases, cell: CellResult, sig: str) -> _Cases:
    return replace(c, cell=replace(c.cell, status="error", type="infrastructure",
                                   message=cell.error or "infrastructure error"),
                   probes=_skipped(c.probes, "no server"))


def _mark_hang(c: _Cases, cell: CellResult, sig: str) -> _Cases:
    return replace(c, cell=replace(c.cell, status="error", type="hang",
                                   message="the server never became healthy"
                                           f"{': ' + sig if sig else ''}"),
                   probes=_skipped(c.probes, "no server"))


def _mark_crash(c: _Cases, cell: CellResult, sig: str) -> _Cases:
    return replace(c, cell=replace(c.cell, status="failure", type="crash",
                                   message=sig or cell.error or "the server crashed"),
                   probes=_skipped(c.probes, "the server crashed"))


def _mark_bad_answers(c: _Cases, cell: CellResult, sig: str) -> _Cases:
    p = cell.probes
    return replace(c, probes=replace(c.probes, status="failure", type=cell.outcome.value,
                                     message="; ".join(x for x in (
                                         sig, c.probes.output, *(p.failures[:3] if p else []))
                                         if x)))


# How each outcome marks the cases (an ok cell leaves them passed).
_MARKS: Final[dict[Outcome, Callable[[_Cases, CellResult, str], _Cases]]] = {
    Outcome.REFUSED: _mark_refused, Outcome.ERROR: _mark_error, Outcome.HANG: _mark_hang,
    Outcome.CRASH: _mark_crash, Outcome.GARBAGE: _mark_bad_answers,
    Outcome.DEGRADED: _mark_bad_answers}


def run_smoke(hosts: Sequence[Host], req: SmokeRequest, *, opts: RemoteOptions,
              root: Path | None = None, argv: Sequence[str] = (),
              on_cell: Callable[[CellResult], None] | None = None,
              caches: RunCaches | None = None) -> RunModel:
    """The smoke check `req` on every host (in parallel); the run lands in runs/<run-id>/, its
    files written; its model comes back (`model.smoke`: the hosts and cases the terminal, the
    JUnit XML and `--json` draw, read back from the end entry). `opts`: how to reach the
    hosts; `caches`: the run's (a fresh one when none is given)."""
    caches = caches if caches is not None else RunCaches()
    plans = [(h, production_configs(h, req.budgets)) for h in hosts]
    t0 = time.monotonic()
    store = RunStore.create("smoke", root or runs_root())
    store.append({"type": "run", "run_id": store.run_id, "command": "smoke", "argv": list(argv),
                  "hosts": [h.name for h in hosts], "budgets": sorted({c.budget for _, cs in
                                                                        plans for c in cs}),
                  "started_at": utc_stamp(), "options": {}})
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(hosts)))) as pool:
        futs = [pool.submit(smoke_host, h, cs, req, opts=opts, caches=caches,
                            log_dir=store.dir / "logs", on_cell=on_cell)
                for h, cs in plans]
        results = [f.result() for f in futs]
    for hs in results:
        for c in hs.cells:
            store.cell(c)
    rep = SmokeReport(store.run_id, store.dir, results, time.monotonic() - t0)
    store.append({"type": "end", "finished_at": utc_stamp(),
                  "restarts_used": sum(1 for h in results for c in h.cells
                                       if c.timings.get("restart") is not None),
                  "exit_code": rep.exit_code, "wall_s": round(rep.wall_s, 3),
                  "smoke_hosts": [{k: v for k, v in h.to_dict().items() if k != "cells"}
                                  | {"timestamp": h.timestamp} for h in results]})
    model = load_model(store.dir)
    try:
        write_reports(model)
    except Exception:  # the files are a convenience: the verdict is the exit code and JUnit
        pass
    return model
