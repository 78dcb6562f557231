"""ONE restart-and-wait sequence, for every caller: a cell (`experiment`), a sanitize cell
(`sanitize`) and `ddprobe server start|restart` (`start_server`, which runs the command's one
`StartRequest`).

    rs = Restart(r, host, config, timeout=600.0, stall=120.0, caches=caches)  # the run's
    fail = rs.prepare() or rs.stop_old()       # RestartFailure | None
    rs.start()
    with rs.tunnel() as url:
        fail = rs.wait(url)                    # healthy: None; else classified, log read
    rs.stop_server()                           # the caller decides when (never half-started)

prepare -> preflight-checked launch (RefusedError becomes a `refused` failure before any
restart: the running server is left alone) -> stop the old server (an unclean stop is an
`error`) -> start -> wait healthy (with the fatal-line watch of `cell.health`) -> on failure,
read the rest of the log (a fatal line: let it finish dying for `settle_s`) and classify it.
One failure vocabulary: `RestartFailure(phase, kind, verdict)`; phase prepare | stop | health,
kind refused | unclean-stop | died | fatal | stalled | timeout. Timings: prepare, stop, start,
restart (= stop + start), health, cleanup; `waited` is the part spent waiting for a server.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from ddprobe.cell.classify import (
    Classification,
    classify_dead,
    classify_hang,
    excerpt,
    refused_signature,
)
from ddprobe.cell.health import HealthReporter, HealthResult, Unhealthy, wait_healthy
from ddprobe.errors import RefusedError
from ddprobe.inventory import Host
from ddprobe.remote import Remote
from ddprobe.results import Config, Outcome, Signature
from ddprobe.server.caches import RunCaches
from ddprobe.server.launch import Launch, build_launch, check_launch, host_flags, server_target
from ddprobe.server.manager import Manager, Peek, StartInfo, StopInfo
from ddprobe.server.preflight import preflight_launch
from ddprobe.server.prepare import prepare_host
from ddprobe.server.registry import get_manager
from ddprobe.untrusted import file_part


def prepared_launch(r: Remote, host: Host, config: Config, mgr: Manager, *,
                    preflight: bool = True, caches: RunCaches | None = None) -> Launch:
    """Prepare the host, build the launch for `config`, check it against the installed flags,
    then (`preflight`) through the host's own SGLang argument handling: RefusedError when the
    server would refuse it or run it under another label (`server.preflight`). `caches`: the
    run's (prepare once, flags read once; a fresh one when none is given)."""
    caches = caches if caches is not None else RunCaches()
    notes = []
    note = prepare_host(r, host, caches=caches)
    if note:
        notes.append(note)
    flags, why = host_flags(r, host, cache=caches.flags)
    if why:
        notes.append(why)
    launch = build_launch(host, config, flags, template=mgr.template(), notes=notes)
    launch = check_launch(launch, flags)
    return preflight_launch(r, host, launch) if preflight else launch


RestartPhase = Literal["prepare", "stop", "health"]
RestartKind = Literal["refused", "unclean-stop"] | Unhealthy
# a start's status: up (healthy, or started without a wait), else the outcome it failed with
StartStatus = Literal["healthy", "started", "ok", "crash", "garbage", "hang", "degraded",
                      "refused", "error"]
_OUTCOME_STATUS: Final[dict[Outcome, StartStatus]] = {
    Outcome.OK: "ok", Outcome.CRASH: "crash", Outcome.GARBAGE: "garbage", Outcome.HANG: "hang",
    Outcome.DEGRADED: "degraded", Outcome.REFUSED: "refused", Outcome.ERROR: "error"}
assert set(_OUTCOME_STATUS) == set(Outcome), "an Outcome without its StartStatus"


@dataclass(frozen=True)
class RestartFailure:
    """Why a restart gave no healthy server, and its verdict (outcome, signature, error)."""

    phase: RestartPhase
    kind: RestartKind
    verdict: Classification


MARKER_GRACE_S = 5.0  # after the settle marker: the most a process takes to exit on its own


class Restart:
    """The state of one restart: the manager, the launch, the log read so far, timings."""

    def __init__(self, r: Remote, host: Host, config: Config, *, timeout: float,
                 stall: float = 0.0, wrap: Callable[[Launch], Launch] | None = None,
                 settle_s: float = 2.0, settle_marker: str = "",
                 caches: RunCaches | None = None) -> None:
        self.r, self.host, self.config = r, host, config
        self.caches = caches if caches is not None else RunCaches()  # the run's
        self.timeout, self.stall, self.wrap = timeout, stall, wrap
        self.settle_s, self.settle_marker = settle_s, settle_marker
        self.mgr: Manager | None = None
        self.launch: Launch | None = None
        self.old_stop: StopInfo | None = None
        self.start_info: StartInfo | None = None
        self.health: HealthResult | None = None
        self.started = False
        self.log = ""
        self.offset = 0  # how far into the server log `log` has read (the manager's unit)
        self.timings: dict[str, float] = {}
        self.waited = 0.0  # seconds spent waiting for a server (not ddprobe's own time)

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t

    @property
    def manager(self) -> Manager:
        if self.mgr is None:
            self.mgr = get_manager(self.r, self.host)
        return self.mgr

    def prepare(self) -> RestartFailure | None:
        """Build and check the launch; a refusal fails here, before anything is stopped."""
        with self.timed("prepare"):
            try:
                launch = prepared_launch(self.r, self.host, self.config, self.manager,
                                         caches=self.caches)
            except RefusedError as e:
                return RestartFailure("prepare", "refused", Classification(
                    Outcome.REFUSED, refused_signature(str(e)), str(e)))
            self.launch = self.wrap(launch) if self.wrap is not None else launch
        return None

    def stop_old(self) -> RestartFailure | None:
        with self.timed("stop"):
            st = self.old_stop = self.manager.stop()
        self.waited += st.elapsed
        if st.clean:
            return None
        return RestartFailure("stop", "unclean-stop", Classification(
            Outcome.ERROR, error=f"the previous server did not stop cleanly: {st.problem()}"))

    def start(self) -> StartInfo:
        assert self.launch is not None, "prepare() first"
        # started before the call returns: a Ctrl-C while the host launches it must still
        # stop it (stopping a server that never started is a no-op)
        self.started = True
        with self.timed("start"):
            info = self.start_info = self.manager.start(self.launch)
        self.timings["restart"] = self.timings.get("stop", 0.0) + self.timings["start"]
        return info

    @contextlib.contextmanager
    def tunnel(self) -> Iterator[str]:
        """The server's URL as seen from here, through the host's tunnel."""
        with self.r.tunnel(self.host.server.port, server_target(self.host)) as lport:
            yield f"http://127.0.0.1:{lport}"

    def wait(self, url: str, reporter: HealthReporter | None = None) -> RestartFailure | None:
        """Wait until healthy; otherwise read the rest of the log and classify the failure."""
        with self.timed("health"):
            h = self.health = wait_healthy(url, self.manager.peek, timeout=self.timeout,
                                           reporter=reporter, stall=self.stall)
        self.waited += self.timings["health"]
        self.log, self.offset = h.log, h.offset
        if h.status == "healthy":
            return None
        return RestartFailure("health", h.status, self._unhealthy(h.status))

    def _unhealthy(self, status: Unhealthy) -> Classification:
        if status in ("timeout", "stalled"):
            self.tail()
            return classify_hang(self.log, self.timeout,
                                 stalled=self.stall if status == "stalled" else None)
        if status == "fatal":
            self.settle(self.settle_s)  # let it finish writing (and dying) before reading
        else:
            self.tail()
        return classify_dead(self.log, package=self.host.package, during="start-up")

    def peek(self) -> Peek:
        """Append what the server logged since the last look."""
        p = self.manager.peek(self.offset)
        self.offset = p.offset
        self.log += p.data
        return p

    def tail(self) -> bool:
        """Read the log's new text; is the server alive?"""
        return self.peek().alive

    def settle(self, seconds: float) -> bool:
        """Read the log while the process exits on its own for up to `seconds` (once it logs
        `settle_marker`, at most MARKER_GRACE_S more); True if still alive."""
        t0 = time.perf_counter()
        deadline, delay = t0 + seconds, 0.05
        try:
            while True:
                p = self.peek()
                now = time.perf_counter()
                if not p.alive or now >= deadline:
                    return p.alive
                if self.settle_marker and self.settle_marker in p.data:
                    # the marker is the last line a wrapper prints before it exits itself:
                    # give the exit a moment, or a dying server reads as alive
                    deadline = min(deadline, now + MARKER_GRACE_S)
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        finally:
            self.waited += time.perf_counter() - t0  # the server's time, not ddprobe's

    def stop_server(self) -> StopInfo:
        """Stop the server this restart started (timed as `cleanup`)."""
        with self.timed("cleanup"):
            st = self.manager.stop()
        self.waited += st.elapsed
        self.started = False
        return st


def copy_log(text: str, log_dir: Path, host: str, key: str, kind: str = "") -> Path:
    """Write a cell's server log to `log_dir` as HOST-KEY[-KIND].log (-2, -3, ... when taken);
    an inventory name never leaves log_dir."""
    log_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{file_part(host)}-{file_part(key)}" + (f"-{file_part(kind)}" if kind else "")
    path = log_dir / f"{stem}.log"
    n = 2
    while path.exists():
        path = log_dir / f"{stem}-{n}.log"
        n += 1
    path.write_text(text, encoding="utf-8")
    return path


@dataclass
class StartReport:
    host: str
    config: Config
    status: StartStatus
    launch: tuple[str, ...] = ()
    start: StartInfo | None = None
    stop: StopInfo | None = None
    elapsed: float | None = None  # health wait
    signature: Signature | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    log_excerpt: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "config": self.config.to_dict(), "status": self.status,
                "launch": list(self.launch),
                "start": self.start.to_dict() if self.start else None,
                "stop": self.stop.to_dict() if self.stop else None, "elapsed": self.elapsed,
                "signature": self.signature.to_dict() if self.signature else None,
                "error": self.error, "notes": self.notes, "log_excerpt": self.log_excerpt}


@dataclass(frozen=True)
class StartRequest:
    """What `ddprobe server start|restart` asks for (the server's options resolved against the
    host into `config` by the command)."""

    config: Config
    restart: bool = False  # stop the running server first (`server restart`)
    wait: bool = True  # wait until /health_generate answers
    health_timeout: float | None = None  # seconds; None: the host's server.health_timeout


def start_server(r: Remote, host: Host, req: StartRequest, *,
                 reporter: HealthReporter | None = None,
                 caches: RunCaches | None = None) -> StartReport:
    """Start the server with `req.config` (after stopping the old one when `req.restart`),
    then wait until healthy (unless not `req.wait`). A server that fails to come up is stopped
    again (no half-started group)."""
    config, wait = req.config, req.wait
    limit = host.server.health_timeout if req.health_timeout is None else req.health_timeout
    rs = Restart(r, host, config, timeout=limit, stall=host.server.stall_timeout, caches=caches)
    rep = StartReport(host.name, config, "error")
    fail = rs.prepare()
    if fail is not None:
        return _failed(rep, fail)
    assert rs.launch is not None
    rep.launch, rep.notes = rs.launch.argv, list(rs.launch.notes)
    if req.restart:
        fail = rs.stop_old()
        rep.stop = rs.old_stop
        if fail is not None:
            rep.error = fail.verdict.error
            return rep
    rep.start = rs.start()
    if not wait:
        rep.status = "started"
        return rep
    try:
        with rs.tunnel() as url:
            fail = rs.wait(url, reporter)
    except BaseException:
        with contextlib.suppress(Exception):
            rs.stop_server()
        raise
    rep.elapsed = rs.health.elapsed if rs.health is not None else None
    if fail is None:
        rep.status = "healthy"
        return rep
    _failed(rep, fail)
    rep.log_excerpt = excerpt(rs.log, fail.verdict.signature)
    rs.stop_server()
    return rep


def _failed(rep: StartReport, fail: RestartFailure) -> StartReport:
    v = fail.verdict
    rep.status, rep.signature, rep.error = _OUTCOME_STATUS[v.outcome], v.signature, v.error
    return rep
