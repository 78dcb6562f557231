"""Start / restart / stop a host's server as one library call each (`ddprobe server ...`).

`prepared_launch` is the common first step of a start and of a cell: run the host's prepare
step, read the installed flags, build the launch and check it (RefusedError before any
restart when the installed version would refuse a flag).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from ddprobe.cell.classify import classify_dead, classify_hang, excerpt, refused_signature
from ddprobe.cell.health import HealthReporter, wait_healthy
from ddprobe.errors import RefusedError
from ddprobe.inventory import Host
from ddprobe.remote import Remote
from ddprobe.results import Config, Signature
from ddprobe.server.launch import Launch, build_launch, check_launch, host_flags, server_target
from ddprobe.server.manager import Manager, StartInfo, StopInfo, get_manager
from ddprobe.server.preflight import preflight_launch
from ddprobe.server.prepare import prepare_host


def prepared_launch(r: Remote, host: Host, config: Config, mgr: Manager, *,
                    preflight: bool = True) -> Launch:
    """Prepare the host, build the launch for `config`, check it against the installed flags,
    then (`preflight`) through the host's own SGLang argument handling: RefusedError when the
    server would refuse it or run it under another label (`server.preflight`)."""
    notes = []
    note = prepare_host(r, host)
    if note:
        notes.append(note)
    flags, why = host_flags(r, host)
    if why:
        notes.append(why)
    launch = build_launch(host, config, flags, template=mgr.template(), notes=notes)
    launch = check_launch(launch, flags)
    return preflight_launch(r, host, launch) if preflight else launch


@dataclass
class StartReport:
    host: str
    config: Config
    status: str  # healthy | started (no wait) | crash | hang | refused | error
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


def start_server(r: Remote, host: Host, config: Config, *, restart: bool = False,
                 wait: bool = True, timeout: float | None = None,
                 reporter: HealthReporter | None = None) -> StartReport:
    """Start the server with `config` (after stopping the old one when `restart`), then wait
    until healthy. A server that fails to come up is stopped again (no half-started group)."""
    mgr = get_manager(r, host)
    rep = StartReport(host.name, config, "error")
    try:
        launch = prepared_launch(r, host, config, mgr)
    except RefusedError as e:
        rep.status, rep.error, rep.signature = "refused", str(e), refused_signature(str(e))
        return rep
    rep.launch, rep.notes = launch.argv, list(launch.notes)
    if restart:
        rep.stop = mgr.stop()
        if not rep.stop.clean:
            rep.error = f"the previous server did not stop cleanly: {rep.stop.problem()}"
            return rep
    rep.start = mgr.start(launch)
    if not wait:
        rep.status = "started"
        return rep
    limit = host.server.health_timeout if timeout is None else timeout
    try:
        with r.tunnel(host.server.port, server_target(host)) as lport:
            h = wait_healthy(f"http://127.0.0.1:{lport}", mgr.peek, timeout=limit,
                             reporter=reporter, stall=host.server.stall_timeout)
    except BaseException:
        with contextlib.suppress(Exception):
            mgr.stop()
        raise
    rep.elapsed = h.elapsed
    if h.healthy:
        rep.status = "healthy"
        return rep
    log = h.log + mgr.peek(h.offset).data
    v = classify_hang(log, limit) if h.status == "timeout" else \
        classify_hang(log, limit, stalled=host.server.stall_timeout) if h.status == "stalled" \
        else classify_dead(log, package=host.package, during="start-up")
    rep.status, rep.signature, rep.error = v.outcome.value, v.signature, v.error
    rep.log_excerpt = excerpt(log, v.signature)
    mgr.stop()
    return rep
