"""One cell: lock -> check flags -> stop the old server -> start with a config -> health wait
-> probes -> classify (ok, crash, garbage, hang, degraded, refused, error) with a signature,
metrics, timings and a log excerpt.

    with connect(host) as r:
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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from ddprobe import interrupt
from ddprobe.cell.classify import (
    Baseline,
    Verdict,
    classify_dead,
    classify_hang,
    classify_served,
    excerpt,
    refused_signature,
    serving_failure,
)
from ddprobe.cell.health import HealthResult, fatal_match, health_now, wait_healthy
from ddprobe.cell.kernel_log import recent_xid_lines
from ddprobe.cell.restart import prepared_launch
from ddprobe.cell.served import model_loaded
from ddprobe.effective import fetch_server_info, from_log, from_server_args
from ddprobe.errors import DdprobeError, PatchError, RefusedError, RemoteCommandError, RemoteError
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
from ddprobe.server.launch import server_target
from ddprobe.server.lock import HostLock
from ddprobe.server.manager import Manager, get_manager
from ddprobe.signatures.decode import decode_notes, summarise_decode
from ddprobe.sources.patches import revert_temporary
from ddprobe.untrusted import file_part

__all__ = ["Baseline", "CellReporter", "ProbeOptions", "run_cell", "run_sanitize_cell"]

_INFRA = (RemoteError, HostOpError, RemoteCommandError, ProbeHTTPError)


@dataclass(frozen=True)
class ProbeOptions:
    suite: str = "coding"
    concurrency: int = 8
    tasks: tuple[str, ...] | None = None
    max_tokens: int = 512
    timeout: float = 300.0  # per request


class CellReporter:
    """Progress of a cell, for the CLI to render (library code never prints). No-op here."""

    def stage(self, name: str, detail: str = "") -> None:
        return None

    def health(self, elapsed: float, timeout: float, stage: str, last_line: str) -> None:
        return None

    def probe(self, result: TaskResult, done: int, total: int) -> None:
        return None


def run_cell(r: Remote, host: Host, config: Config, *, probe: ProbeOptions = ProbeOptions(),
             baseline: Baseline | CellResult | None = None, log_dir: Path | None = None,
             reporter: CellReporter | None = None, lock: HostLock | None = None,
             break_lock: bool = False, health_timeout: float | None = None,
             keep_answers: bool = False, stop_after: bool = False,
             launch_prefix: Sequence[str] = (), keep_patches: Sequence[str] = ()
             ) -> CellResult:
    """Run one cell on a connected host and classify it. Raises LockedError when another run
    holds the host, ConfigError for a broken host entry; every other failure is in the cell.

    `launch_prefix` wraps the launch command (e.g. `compute-sanitizer --tool memcheck`); the
    flag check still sees only the server's own flags."""
    # the probe options are the user's input: a bad suite or task id is refused here, before
    # the lock, the flag check or a restart touch the host (it was found after the launch)
    load_suite(probe.suite).select(list(probe.tasks) if probe.tasks else None)
    rep = reporter or CellReporter()
    base = Baseline.from_cell(baseline) if isinstance(baseline, CellResult) else baseline
    run = _Cell(r, host, config, probe, base, rep, health_timeout, keep_answers)
    run.prefix = tuple(launch_prefix)
    lk = lock if lock is not None else HostLock(r, host, break_lock=break_lock)
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
        cell.local_log = str(_copy_log(run.log, Path(log_dir), host.name, config.key))
    return cell


class _Cell:
    def __init__(self, r: Remote, host: Host, config: Config, probe: ProbeOptions,
                 baseline: Baseline | None, rep: CellReporter, health_timeout: float | None,
                 keep_answers: bool) -> None:
        self.r, self.host, self.config, self.opts = r, host, config, probe
        self.baseline, self.rep, self.keep_answers = baseline, rep, keep_answers
        self.timeout = health_timeout if health_timeout is not None else \
            host.server.health_timeout
        self.mgr: Manager | None = None
        self.prefix: tuple[str, ...] = ()
        self.started = False
        self.log = ""
        self.offset = 0
        self.timings: dict[str, float] = {}
        self.waited = 0.0  # seconds spent waiting for a server (not ddprobe's own time)
        self.cell = CellResult(host=host.name, config=config, outcome=Outcome.ERROR,
                               started_at=datetime.now(timezone.utc).isoformat(
                                   timespec="seconds"))

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t

    def run(self) -> CellResult:
        t0 = time.perf_counter()
        try:
            verdict = self._steps()
        except _INFRA as e:
            verdict = Verdict(Outcome.ERROR, error=str(e))
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
        self.timings["overhead"] = max(0.0, self.timings["total"] - self.waited)
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
            self.cell.notes.append(f"kernel log ({source}): {len(lines)} NVIDIA Xid "
                                       f"line(s) during the cell; last: {lines[-1][:200]}")

    def _steps(self) -> Verdict:
        r, host, rep = self.r, self.host, self.rep
        rep.stage("prepare", host.name)
        with self.timed("prepare"):
            self.mgr = mgr = get_manager(r, host)
            try:
                launch = prepared_launch(r, host, self.config, mgr)
            except RefusedError as e:
                # refused before any restart: the running server (if any) is left alone
                return Verdict(Outcome.REFUSED, refused_signature(str(e)), str(e))
            if self.prefix:
                launch = replace(launch, argv=(*self.prefix, *launch.argv))
            self.cell.launch = list(launch.argv)
            self.cell.notes += list(launch.notes)
            self.cell.flags_checked = launch.checked
            if launch.preflight is not None:
                self.cell.preflight = launch.preflight.status
            self.cell.effective = launch.effective  # until the server says what it runs
        rep.stage("stop", "stopping the previous server")
        with self.timed("stop"):
            stop = mgr.stop()
        self.waited += stop.elapsed
        self.cell.stop = stop.to_dict()
        if not stop.clean:
            return Verdict(Outcome.ERROR, error=f"the previous server did not stop cleanly: "
                                                f"{stop.problem()}")
        rep.stage("start", self.config.key)
        # started before the call returns: a Ctrl-C while the host launches it must still
        # stop it (stopping a server that never started is a no-op)
        self.started = True
        with self.timed("start"):
            start = mgr.start(launch)
        self.cell.log_path = start.log_path
        self.timings["restart"] = self.timings["stop"] + self.timings["start"]
        with self.r.tunnel(host.server.port, server_target(host)) as lport:
            url = f"http://127.0.0.1:{lport}"
            rep.stage("health", url)
            with self.timed("health"):
                h = wait_healthy(url, mgr.peek, timeout=self.timeout, reporter=rep,
                                 stall=host.server.stall_timeout)
            self.waited += self.timings["health"]
            self.cell.health = {"status": h.status, "elapsed": round(h.elapsed, 3),
                                    "stage": h.stage, "polls": h.polls, "peeks": h.peeks}
            self.log = h.log
            if not h.healthy:
                return self._not_healthy(h)
            with self.timed("server_info"):
                self._read_effective(url)
            rep.stage("probe", f"{self.opts.suite} x{self.opts.concurrency}")
            with self.timed("probe"):
                report = self._probe(url)
            self.waited += self.timings["probe"]
            return self._served(report, h, url)

    def _read_effective(self, url: str) -> None:
        """What the server says it runs, before the probes can kill it."""
        info, path = fetch_server_info(url)
        if info:
            self.cell.effective = from_server_args(info, source="server_info")
            self.cell.server_info_path = path
        else:
            self.cell.notes.append("neither /server_info nor /get_server_info answered: "
                                       "the effective config comes from the log alone")

    def _not_healthy(self, h: HealthResult) -> Verdict:
        assert self.mgr is not None
        if h.status in ("timeout", "stalled"):
            self._tail()
            v = classify_hang(self.log, self.timeout, stalled=self.host.server.stall_timeout
                              if h.status == "stalled" else None)
            self.cleanup()
            return v
        self.offset = h.offset
        if h.status == "fatal":
            self._settle()  # let it finish writing (and dying) before reading the log
        else:
            self._tail()
        v = classify_dead(self.log, package=self.host.package, during="start-up")
        self.cleanup()
        return v

    def _settle(self, seconds: float = 2.0) -> bool:
        """Read the rest of the log while the process exits on its own; True if still alive."""
        t0 = time.perf_counter()
        delay = 0.05
        try:
            while True:
                alive = self._tail()
                if not alive or time.perf_counter() >= t0 + seconds:
                    return alive
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        finally:
            self.waited += time.perf_counter() - t0  # the server's time, not ddprobe's

    def _tail(self) -> bool:
        """Append what the server logged since the last look; is it alive?"""
        assert self.mgr is not None
        p = self.mgr.peek(self.offset)
        self.offset = p.offset
        self.log += p.data
        return p.alive

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
                          tasks=list(o.tasks) if o.tasks else None, max_tokens=o.max_tokens)

    def _served(self, report: ProbeReport, h: HealthResult, url: str) -> Verdict:
        with self.timed("classify"):
            self.offset = h.offset
            alive = self._tail()
            self.cell.probes = report.summary
            self.cell.probe_check_s = round(sum(t.check_s or 0.0 for t in report.results), 4)
            if self.keep_answers:
                self.cell.answers = baseline_from_report(report)
                self.cell.answer_ids = ids_from_report(report)
            if alive and (fatal_match(self.log) is not None or
                          serving_failure(self.log) is not None):
                alive = self._settle()  # read the rest of the failure while it exits
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
        if self.mgr is None:
            return
        with self.timed("cleanup"):
            st = self.mgr.stop()
        self.waited += st.elapsed
        self.cell.cleanup = st.to_dict()
        self.started = False

    def _finish(self, v: Verdict) -> CellResult:
        c = self.cell
        c.outcome, c.signature, c.error = v.outcome, v.signature, v.error
        c.timings = {k: round(val, 4) for k, val in self.timings.items()}
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


def _copy_log(text: str, log_dir: Path, host: str, key: str) -> Path:
    log_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{file_part(host)}-{file_part(key)}"  # an inventory name never leaves log_dir
    path = log_dir / f"{stem}.log"
    n = 2
    while path.exists():
        path = log_dir / f"{stem}-{n}.log"
        n += 1
    path.write_text(text, encoding="utf-8")
    return path


# the sanitize cell (the failing config under compute-sanitizer) is the other kind of cell
from ddprobe.cell.sanitize import run_sanitize_cell  # noqa: E402
