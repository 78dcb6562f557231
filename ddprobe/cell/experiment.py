"""One cell: lock -> check flags -> stop the old server -> start with a config -> health wait
-> probes -> classify (ok, crash, garbage, hang, degraded, refused, error) with a signature,
metrics, timings and a log excerpt.

    with connect(host, opts) as r:
        cell = run_cell(r, host, Config(budget=16), probe=ProbeOptions(tasks=("fizzbuzz",)))

The lock is re-entrant: a bisect holds it for a whole run (`with HostLock(r, host):`) and each
cell takes it again. Infrastructure failures (SSH drop, port in use, disk full, a broken launch
command) make the cell `error`, never `crash`. Timings: prepare (host prep + flags check), stop,
start, restart (= stop + start), health, probe, total, and `overhead` = the part of the cell
not spent waiting for a server (the old one to exit, the new one to come up and answer).
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ddprobe import interrupt
from ddprobe.cell.classify import (
    Baseline,
    Classification,
    classify_served,
    excerpt,
    serving_failure,
)
from ddprobe.cell.health import HealthResult, fatal_match, health_now
from ddprobe.cell.kernel_log import recent_xid_lines
from ddprobe.cell.phases import cell_phases
from ddprobe.cell.restart import Restart, copy_log
from ddprobe.cell.served import model_loaded
from ddprobe.defaults import PROBE_CONCURRENCY, PROBE_MAX_TOKENS, PROBE_SUITE, PROBE_TIMEOUT_S
from ddprobe.effective import fetch_server_info, from_log, from_server_args
from ddprobe.errors import DdprobeError, PatchError, RemoteCommandError, RemoteError
from ddprobe.hostside.errors import HostOpError
from ddprobe.inventory import Host
from ddprobe.probes.client import ProbeHTTPError
from ddprobe.probes.coding import load_suite
from ddprobe.probes.runner import (
    ProbeReport,
    TaskResult,
    baseline_from_report,
    ids_from_report,
    run_probes,
)
from ddprobe.remote import Remote
from ddprobe.results import CellResult, Config, Outcome
from ddprobe.server.caches import RunCaches
from ddprobe.server.launch import Launch
from ddprobe.server.lock import HostLock
from ddprobe.signatures.decode import decode_notes, summarise_decode
from ddprobe.sources.patches import revert_temporary
from ddprobe.timestamps import utc_stamp_tz
from ddprobe.untrusted import first_chars

XID_NOTE_CAP = 200  # characters of the last Xid line a cell's note quotes

__all__ = ["Baseline", "CellReporter", "CellRequest", "ProbeOptions", "run_cell",
           "run_cell_request", "run_sanitize_cell"]

_INFRA = (RemoteError, HostOpError, RemoteCommandError, ProbeHTTPError)


@dataclass(frozen=True)
class ProbeOptions:
    suite: str = PROBE_SUITE
    concurrency: int = PROBE_CONCURRENCY
    tasks: tuple[str, ...] | None = None
    max_tokens: int = PROBE_MAX_TOKENS
    timeout: float = PROBE_TIMEOUT_S  # per request
    stop_when_dead: bool = False  # end the probe once a request failed and the server died


@dataclass(frozen=True)
class CellRequest:
    """What `ddprobe run` asks for: one cell at `config` (the server's options resolved against
    the host by the command), or with `differential` the budget without and then with CUDA
    graphs, compared (`cell.differential.run_differential`)."""

    config: Config
    probe: ProbeOptions = ProbeOptions()
    baseline: Baseline | None = None  # a stored cell to compare with (never with differential)
    health_timeout: float | None = None  # seconds; None: the host's server.health_timeout
    keep_answers: bool = False  # keep the answers in the cell (a later baseline)
    log_dir: Path | None = None  # copy the server log here
    stop_after: bool = False  # stop the server after the cell (else a working one runs on)
    differential: bool = False


class CellReporter:
    """Progress of a cell, for the CLI to render (library code never prints). No-op here."""

    def stage(self, name: str, detail: str = "") -> None:
        return None

    def health(self, elapsed: float, timeout: float, stage: str, last_line: str) -> None:
        return None

    def probe(self, result: TaskResult, done: int, total: int) -> None:
        return None


def run_cell_request(r: Remote, host: Host, req: CellRequest, *,
                     reporter: CellReporter | None = None, break_lock: bool = False,
                     caches: RunCaches | None = None) -> CellResult:
    """`ddprobe run`'s one cell (`req.differential` is `run_differential`'s)."""
    return run_cell(r, host, req.config, probe=req.probe, baseline=req.baseline,
                    log_dir=req.log_dir, caches=caches, reporter=reporter,
                    break_lock=break_lock, health_timeout=req.health_timeout,
                    keep_answers=req.keep_answers, stop_after=req.stop_after)


def run_cell(r: Remote, host: Host, config: Config, *, probe: ProbeOptions = ProbeOptions(),
             baseline: Baseline | CellResult | None = None, log_dir: Path | None = None,
             reporter: CellReporter | None = None, lock: HostLock | None = None,
             break_lock: bool = False, health_timeout: float | None = None,
             keep_answers: bool = False, stop_after: bool = False,
             launch_prefix: Sequence[str] = (), keep_patches: Sequence[str] = (),
             caches: RunCaches | None = None) -> CellResult:
    """Run one cell on a connected host and classify it. Raises LockedError when another run
    holds the host, ConfigError for a broken host entry; every other failure is in the cell.

    `launch_prefix` wraps the launch command (e.g. `compute-sanitizer --tool memcheck`); the
    flag check still sees only the server's own flags. `caches`: the run's (RunCaches: the
    flags read once, prepare done once, the locks it holds); a fresh one when none is given."""
    # the probe options are the user's input: a bad suite or task id is refused here, before
    # the lock, the flag check or a restart touch the host (it was found after the launch)
    load_suite(probe.suite).select(list(probe.tasks) if probe.tasks else None)
    rep = reporter or CellReporter()
    base = Baseline.from_cell(baseline) if isinstance(baseline, CellResult) else baseline
    caches = caches if caches is not None else RunCaches()
    run = _Cell(r, host, config, probe, base, rep, health_timeout, keep_answers, caches)
    run.prefix = tuple(launch_prefix)
    lk = lock if lock is not None else HostLock(r, host, break_lock=break_lock, caches=caches)
    with lk:
        # a temporary patch an interrupted run left applied is reverted first, and the cell
        # records every patch its install carries (`keep_patches`: the caller's own)
        try:
            pre_notes, on_install = revert_temporary(r, host, keep=keep_patches)
        except PatchError:
            raise
        except DdprobeError as e:
            pre_notes, on_install = [f"the patch ledger could not be read: {e}"], []
        cell = run.run()
        cell.notes[:0] = pre_notes
        cell.patches = sorted(set(cell.patches) | set(on_install))
        if stop_after and run.started and cell.outcome in (Outcome.OK, Outcome.GARBAGE,
                                                           Outcome.DEGRADED):
            run.cleanup()
            cell.timings["cleanup"] = round(run.timings.get("cleanup", 0.0), 4)
    if lk.release_error:
        cell.notes.append(f"the host lock could not be released ({lk.release_error})"
                                   f"; another run will see it as stale")
    if lk.broken is not None:
        cell.notes.append(f"broke a stale lock of {lk.broken.describe()}")
    if log_dir is not None and run.log:
        cell.local_log = str(copy_log(run.log, Path(log_dir), host.name, config.key))
    return cell


class _Cell:
    def __init__(self, r: Remote, host: Host, config: Config, probe: ProbeOptions,
                 baseline: Baseline | None, rep: CellReporter, health_timeout: float | None,
                 keep_answers: bool, caches: RunCaches) -> None:
        self.r, self.host, self.config, self.opts = r, host, config, probe
        self.baseline, self.rep, self.keep_answers = baseline, rep, keep_answers
        self.timeout = health_timeout if health_timeout is not None else \
            host.server.health_timeout
        self.prefix: tuple[str, ...] = ()
        self.rs = Restart(r, host, config, timeout=self.timeout,
                          stall=host.server.stall_timeout, wrap=self._wrap, caches=caches)
        self.timings = self.rs.timings
        self.cell = CellResult(host=host.name, config=config, outcome=Outcome.ERROR,
                               started_at=utc_stamp_tz())

    @property
    def started(self) -> bool:
        return self.rs.started

    @property
    def log(self) -> str:
        return self.rs.log

    def timed(self, name: str) -> contextlib.AbstractContextManager[None]:
        return self.rs.timed(name)

    def _wrap(self, launch: Launch) -> Launch:
        return replace(launch, argv=(*self.prefix, *launch.argv)) if self.prefix else launch

    def run(self) -> CellResult:
        t0 = time.perf_counter()
        try:
            verdict = self._steps()
        except _INFRA as e:
            verdict = Classification(Outcome.ERROR, error=str(e))
            self.cell.error_kind = "unreachable" if isinstance(e, RemoteError) else \
                getattr(e, "kind", "server")
            if self.started:
                with contextlib.suppress(Exception):
                    self.cleanup()
        except BaseException:
            if self.started:  # Ctrl-C mid-cell: leave no half-started server behind
                with interrupt.shielded(), contextlib.suppress(Exception):
                    self.cleanup()
                    interrupt.cleaned(f"stopped the server of {self.config.key} on "
                                      f"{self.host.name}")
            raise
        if verdict.outcome in (Outcome.CRASH, Outcome.HANG):
            self._kernel_log(time.perf_counter() - t0)
        self.timings["total"] = time.perf_counter() - t0
        self.timings["overhead"] = max(0.0, self.timings["total"] - self.rs.waited)
        return self._finish(verdict)

    def _kernel_log(self, elapsed: float) -> None:
        """Xid lines the driver logged during the cell: evidence beside the server's log."""
        with self.timed("kernel_log"):
            try:
                source, lines = recent_xid_lines(self.r, elapsed + 60.0)
            except _INFRA:
                return
        if lines:
            self.cell.xid = lines
            last = first_chars(lines[-1], XID_NOTE_CAP)
            self.cell.notes.append(f"kernel log ({source}): {len(lines)} NVIDIA Xid "
                                   f"line(s) during the cell; last: {last}")

    def _steps(self) -> Classification:
        rs, rep = self.rs, self.rep
        rep.stage("prepare", self.host.name)
        fail = rs.prepare()
        if fail is not None:  # refused before any restart: the running server is left alone
            return fail.verdict
        self._record_launch()
        rep.stage("stop", "stopping the previous server")
        fail = rs.stop_old()
        assert rs.old_stop is not None
        self.cell.stop = rs.old_stop.to_dict()
        if fail is not None:
            return fail.verdict
        rep.stage("start", self.config.key)
        self.cell.log_path = rs.start().log_path
        with rs.tunnel() as url:
            rep.stage("health", url)
            fail = rs.wait(url, rep)
            h = rs.health
            assert h is not None
            self.cell.health = {"status": h.status, "elapsed": round(h.elapsed, 3),
                                "stage": h.stage, "polls": h.polls, "peeks": h.peeks}
            if fail is not None:
                self.cleanup()
                return fail.verdict
            with self.timed("server_info"):
                self._read_effective(url)
            rep.stage("probe", f"{self.opts.suite} x{self.opts.concurrency}")
            with self.timed("probe"):
                report = self._probe(url)
            rs.waited += self.timings["probe"]
            return self._served(report, h, url)

    def _record_launch(self) -> None:
        launch = self.rs.launch
        assert launch is not None
        self.cell.launch = list(launch.argv)
        self.cell.notes += list(launch.notes)
        self.cell.flags_checked = launch.checked
        if launch.preflight is not None:
            self.cell.preflight = launch.preflight.status
        self.cell.effective = launch.effective  # until the server says what it runs

    def _read_effective(self, url: str) -> None:
        """What the server says it runs, before the probes can kill it."""
        info, path = fetch_server_info(url)
        if info:
            self.cell.effective = from_server_args(info, source="server_info")
            self.cell.server_info_path = path
        else:
            self.cell.notes.append("neither /server_info nor /get_server_info answered: "
                                       "the effective config comes from the log alone")

    def _probe(self, url: str) -> ProbeReport:
        o = self.opts
        done = [0]
        total = len(load_suite(o.suite).select(list(o.tasks) if o.tasks else None))

        def progress(res: TaskResult) -> None:
            done[0] += 1
            self.rep.probe(res, done[0], total)

        texts = self.baseline.texts if self.baseline is not None else None
        return run_probes(url, suite=o.suite, concurrency=o.concurrency, timeout=o.timeout,
                          baseline=texts, progress=progress,
                          tasks=list(o.tasks) if o.tasks else None, max_tokens=o.max_tokens,
                          stop=(lambda: not self.rs.tail()) if o.stop_when_dead else None)

    def _served(self, report: ProbeReport, h: HealthResult, url: str) -> Classification:
        with self.timed("classify"):
            self.rs.offset = h.offset
            alive = self.rs.tail()
            self.cell.probes = report.summary
            self.cell.probe_check_s = round(sum(t.check_s or 0.0 for t in report.results), 4)
            if self.keep_answers:
                self.cell.answers = baseline_from_report(report)
                self.cell.answer_ids = ids_from_report(report)
            if alive and (fatal_match(self.log) is not None or
                          serving_failure(self.log) is not None):
                alive = self.rs.settle(2.0)  # read the rest of the failure while it exits
            health = None
            if alive and any(t.errors and not t.text for t in report.results):
                health = health_now(url, timeout=min(30.0, self.opts.timeout))
                self.cell.health_after_probes = health
            ratio = self.host.server.tok_s_min_ratio
            v = classify_served(report, alive=alive, log=self.log, package=self.host.package,
                                baseline=self.baseline, ratio=ratio, health=health)
            if not alive and v.outcome is Outcome.CRASH:
                self.cell.notes.append("the server died while being probed")
            if v.outcome in (Outcome.CRASH, Outcome.HANG) or (v.outcome is Outcome.ERROR
                                                               and not alive):
                self.cleanup()
        return v

    def cleanup(self) -> None:
        if self.rs.mgr is None:
            return
        self.cell.cleanup = self.rs.stop_server().to_dict()

    def _finish(self, v: Classification) -> CellResult:
        c = self.cell
        c.outcome, c.signature, c.error = v.outcome, v.signature, v.error
        c.timings = {k: round(val, 4) for k, val in self.timings.items()}
        c.phases = cell_phases(self.timings, self.log).to_dict()
        c.log_excerpt = excerpt(self.log, v.signature) if self.log else []
        c.effective = c.effective.with_log(self.log) if c.effective is not None else \
            from_log(self.log)
        self.cell.model_loaded = model_loaded(self.log) if self.log else None
        self.cell.notes += [n for n in v.notes if n not in self.cell.notes]
        decode = summarise_decode(self.log) if self.log else None
        if decode is not None:  # acceptance and throughput from the server's own log
            self.cell.decode = decode.to_dict()
            p = c.probes
            http = None if p is None else p.accept_length if p.accept_length is not None \
                else p.server_accept_length
            self.cell.notes += decode_notes(decode, http_accept=http)
        if v.match is not None:
            self.cell.phase = v.match.phase
            self.cell.log_signature = v.match.signature.id  # also for an infra cell
            if v.match.hint:
                self.cell.hint = v.match.hint
            if v.match.details:
                self.cell.details = v.match.details_dict
        return c


# the sanitize cell (the failing config under compute-sanitizer) is the other kind of cell
from ddprobe.cell.sanitize import run_sanitize_cell  # noqa: E402
