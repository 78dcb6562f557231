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
from ddprobe.runmodel import RunModel, load_model
from ddprobe.server.caches import RunCaches
from ddprobe.server.launch import build_launch, check_launch, deterministic_backends, host_flags
from ddprobe.store import RunStore, runs_root
from ddprobe.timestamps import utc_stamp
from ddprobe.untrusted import excerpt

if TYPE_CHECKING:  # the flags come from server.launch.host_flags
    from ddprobe.sources.flags import FlagSet

BaselineLike = Baseline | CellResult | None  # what a cell is compared with (run_cell's)

SEVERITY: Final = (ExitCode.CRASH, ExitCode.HANG, ExitCode.GARBAGE, ExitCode.DEGRADED,
                   ExitCode.REFUSED, ExitCode.SERVER, ExitCode.UNREACHABLE)
LOG_TAIL_LINES: Final = 80
LOG_TAIL_BYTES: Final = 64 << 10


@dataclass
class Case:
    """One JUnit test case: pass | failure | error | skipped."""

    name: str
    classname: str
    status: str = "pass"
    message: str = ""
    type: str = ""
    time: float = 0.0
    output: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class HostSmoke:
    host: str
    cases: list[Case] = field(default_factory=list)
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


def smoke_host(host: Host, configs: Sequence[Config], *, opts: RemoteOptions,
               caches: RunCaches, log_dir: Path | None,
               probe: ProbeOptions | None = None, baseline: BaselineLike = None,
               on_cell: Callable[[CellResult], None] | None = None,
               compare: bool = True) -> HostSmoke:
    """Run the smoke checks on one host (never raises for the host's own problems).
    `compare`: the graph cell's greedy output against eager (`differential b N` case)."""
    t0 = time.monotonic()
    hs = HostSmoke(host.name, timestamp=utc_stamp())
    cls = f"ddprobe.{host.name}"
    facts_case = Case("facts", cls)
    hs.cases.append(facts_case)

    def skip_rest(why: str) -> None:
        for c in configs:
            for n in ("flags", "cell", "probes", *(("differential",) if compare else ())):
                hs.cases.append(Case(f"{n} b{c.budget}", f"{cls}.{c.key}", "skipped", why))

    try:
        with connect(host, opts) as r:
            t = time.monotonic()
            try:
                facts = gather_facts(r, host)
            except RemoteError as e:
                facts_case.status, facts_case.type, facts_case.message = "error", "unreachable", \
                    str(e)
                hs.exit_code = int(ExitCode.UNREACHABLE)
                skip_rest("facts failed")
                return hs
            facts_case.time = time.monotonic() - t
            hs.properties = _properties(host, facts)
            if facts.install is None:
                facts_case.status, facts_case.type = "failure", "install"
                facts_case.message = f"package {host.package!r} is not importable by " \
                                     f"{host.python}"
            flags, why = host_flags(r, host, cache=caches.flags)
            codes: list[int] = []
            for cfg in configs:
                codes.append(_one(r, host, cfg, hs, flags, why, log_dir, probe, baseline,
                                  on_cell, caches, compare))
            hs.exit_code = worst(codes)
    except RemoteError as e:
        if facts_case.status == "pass" and not hs.properties:
            facts_case.status, facts_case.type, facts_case.message = "error", "unreachable", \
                str(e)
            skip_rest("host unreachable")
        hs.exit_code = int(ExitCode.UNREACHABLE)
    finally:
        hs.time = time.monotonic() - t0
    return hs


def _one(r: Remote, host: Host, cfg: Config, hs: HostSmoke, flags: FlagSet | None, why: str,
         log_dir: Path | None, probe: ProbeOptions | None, baseline: BaselineLike,
         on_cell: Callable[[CellResult], None] | None, caches: RunCaches,
         compare: bool = True) -> int:
    """One production config: the flags check, the cell, its probes, and its greedy output
    against eager (four cases)."""
    cls = f"ddprobe.{host.name}.{cfg.key}"
    b = cfg.budget
    flags_case = Case(f"flags b{b}", cls)
    hs.cases.append(flags_case)
    stopped = _check_flags(flags_case, host, cfg, flags, why)
    if stopped is not None:
        code, reason = stopped
        hs.cases += [Case(f"{n} b{b}", cls, "skipped", reason) for n in ("cell", "probes",
                     *(("differential",) if compare else ()))]
        return code
    cell = _cell(r, host, cfg, log_dir, probe, baseline, caches, keep_answers=compare)
    hs.cells.append(cell)
    if on_cell is not None:
        on_cell(cell)
    diff_case = _differential(r, host, cfg, cell, hs, log_dir, probe, baseline, on_cell,
                              caches) if compare else None
    cases = _Cases(flags_case,
                   Case(f"cell b{b}", cls, time=float(cell.timings.get("restart", 0.0))
                        + float(cell.timings.get("health", 0.0)), output=_tail(cell)),
                   Case(f"probes b{b}", cls, time=float(cell.timings.get("probe", 0.0)),
                        output=_metrics(cell)))
    hs.cases += [cases.cell, cases.probes]
    if diff_case is not None:
        hs.cases.append(diff_case)
    mark = _MARKS.get(cell.outcome)
    if mark is not None:
        mark(cases, cell, cell.signature.id if cell.signature else "")
    if cell.outcome is Outcome.ERROR:
        return int(ExitCode.SERVER)
    return int(for_outcome(cell.outcome))


def _check_flags(case: Case, host: Host, cfg: Config, flags: FlagSet | None, why: str
                 ) -> tuple[int, str] | None:
    """The flags case; (exit code, why the rest is skipped) when the config cannot run."""
    t = time.monotonic()
    try:
        launch = build_launch(host, cfg, flags)
        if flags is None:
            case.status, case.message = "skipped", why or "flags not readable"
        else:
            check_launch(launch, flags)
            case.output = " ".join(launch.server_args)
    except RefusedError as e:
        case.status, case.type, case.message = "failure", "refused", str(e)
        return int(ExitCode.REFUSED), "the flags check refused it"
    except ConfigError as e:
        case.status, case.type, case.message = "error", "config", str(e)
        return int(ExitCode.CONFIG), "no launch command"
    case.time = time.monotonic() - t
    return None


def _differential(r: Remote, host: Host, cfg: Config, cell: CellResult, hs: HostSmoke,
                  log_dir: Path | None, probe: ProbeOptions | None, baseline: BaselineLike,
                  on_cell: Callable[[CellResult], None] | None, caches: RunCaches) -> Case:
    """The graph cell's greedy output against eager at the same budget: a stored eager
    baseline's answers where one is given (the eager cell is paid once), else an eager cell
    now. A divergence makes the graph cell garbage; the case names the first diverging
    position."""
    case = Case(f"differential b{cfg.budget}", f"ddprobe.{host.name}.{cfg.key}")
    texts = getattr(baseline, "texts", None)
    # a baseline's answers may already have made the cell garbage (they differ): compare them
    if cell.outcome not in (Outcome.OK, Outcome.DEGRADED) and not (
            texts and cell.outcome is Outcome.GARBAGE and cell.answers):
        case.status, case.message = "skipped", f"the graph cell is {cell.outcome.value}"
        return case
    t = time.monotonic()
    if texts:
        eager: Any = differential.Side(getattr(baseline, "key", "") or "baseline",
                                       texts=dict(texts), graph=False)
        d = differential.compare(differential.side_of(cell), eager,
                                 backends=deterministic_backends(r, host, cache=caches.flags))
        if d.status == differential.DIVERGED:
            differential.mark_garbage(cell, d)
    else:
        ec = _cell(r, host, replace(cfg, graph=False), log_dir, probe, None, caches,
                   keep_answers=True)
        hs.cells.append(ec)
        if on_cell is not None:
            on_cell(ec)
        if ec.outcome is not Outcome.OK:
            case.status, case.type = "error", "eager"
            case.message = f"the eager cell could not give a reference: {ec.outcome.value}" + \
                (f" ({ec.error})" if ec.error else "")
            return case
        d = differential.apply(cell, ec,
                               backends=deterministic_backends(r, host, cache=caches.flags))
    case.time = time.monotonic() - t
    cover = differential.batch_coverage(cell)  # the graphs the comparison did not replay
    case.output = d.summary + (f"; {cover[0]}" if cover and d.status == differential.SAME
                               else "")
    if d.status == differential.DIVERGED:
        case.status, case.type, case.message = "failure", "divergence", d.summary
    elif d.status == differential.INCOMPARABLE:
        case.status, case.message = "skipped", d.summary
    return case


def _cell(r: Remote, host: Host, cfg: Config, log_dir: Path | None,
          probe: ProbeOptions | None, baseline: BaselineLike,
          caches: RunCaches, *, keep_answers: bool = False) -> CellResult:
    kw: dict[str, Any] = {"log_dir": log_dir, "caches": caches, "keep_answers": keep_answers}
    if probe is not None:
        kw["probe"] = probe
    if baseline is not None:
        kw["baseline"] = baseline
    try:
        return run_cell(r, host, cfg, **kw)
    except DdprobeError as e:
        return CellResult(host=host.name, config=cfg, outcome=Outcome.ERROR, error=str(e))


def _metrics(cell: CellResult) -> str:
    p = cell.probes
    if p is None:
        return ""
    return f"{p.label}" + (f", accept {p.accept_length:.2f}" if p.accept_length else "") \
        + (f", {p.tok_s:.0f} tok/s" if p.tok_s else "")


@dataclass
class _Cases:
    """The three cases of one config."""

    flags: Case
    cell: Case
    probes: Case


def _mark_refused(c: _Cases, cell: CellResult, sig: str) -> None:
    c.flags.status, c.flags.type = "failure", "refused"
    c.flags.message = cell.error or sig or "the server refused the flags"
    c.cell.status = c.probes.status = "skipped"
    c.cell.message = c.probes.message = "the server refused the config"


def _mark_error(c: _Cases, cell: CellResult, sig: str) -> None:
    c.cell.status, c.cell.type = "error", "infrastructure"
    c.cell.message = cell.error or "infrastructure error"
    c.probes.status, c.probes.message = "skipped", "no server"


def _mark_hang(c: _Cases, cell: CellResult, sig: str) -> None:
    c.cell.status, c.cell.type = "error", "hang"
    c.cell.message = f"the server never became healthy{': ' + sig if sig else ''}"
    c.probes.status, c.probes.message = "skipped", "no server"


def _mark_crash(c: _Cases, cell: CellResult, sig: str) -> None:
    c.cell.status, c.cell.type = "failure", "crash"
    c.cell.message = sig or cell.error or "the server crashed"
    c.probes.status, c.probes.message = "skipped", "the server crashed"


def _mark_bad_answers(c: _Cases, cell: CellResult, sig: str) -> None:
    p = cell.probes
    c.probes.status, c.probes.type = "failure", cell.outcome.value
    c.probes.message = "; ".join(x for x in (sig, c.probes.output,
                                             *(p.failures[:3] if p else [])) if x)


# How each outcome marks the cases (an ok cell leaves them passed).
_MARKS: Final[dict[Outcome, Callable[[_Cases, CellResult, str], None]]] = {
    Outcome.REFUSED: _mark_refused, Outcome.ERROR: _mark_error, Outcome.HANG: _mark_hang,
    Outcome.CRASH: _mark_crash, Outcome.GARBAGE: _mark_bad_answers,
    Outcome.DEGRADED: _mark_bad_answers}


def run_smoke(hosts: Sequence[Host], *, opts: RemoteOptions, budgets: Sequence[int] = (),
              probe: ProbeOptions | None = None, baseline: BaselineLike = None,
              root: Path | None = None,
              argv: Sequence[str] = (), on_cell: Callable[[CellResult], None] | None = None,
              caches: RunCaches | None = None, compare: bool = True) -> RunModel:
    """The smoke check on every host (in parallel); the run lands in runs/<run-id>/, its files
    written; its model comes back (`model.smoke`: the hosts and cases the terminal, the JUnit
    XML and `--json` draw, read back from the end entry). `opts`: how to reach the hosts;
    `caches`: the run's (a fresh one when none is given)."""
    caches = caches if caches is not None else RunCaches()
    plans = [(h, production_configs(h, budgets)) for h in hosts]
    t0 = time.monotonic()
    store = RunStore.create("smoke", root or runs_root())
    store.append({"type": "run", "run_id": store.run_id, "command": "smoke", "argv": list(argv),
                  "hosts": [h.name for h in hosts], "budgets": sorted({c.budget for _, cs in
                                                                        plans for c in cs}),
                  "started_at": utc_stamp(), "options": {}})
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(hosts)))) as pool:
        futs = [pool.submit(smoke_host, h, cs, opts=opts, caches=caches,
                            log_dir=store.dir / "logs", probe=probe,
                            baseline=baseline, on_cell=on_cell, compare=compare)
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
