"""Health wait: poll /health then /health_generate until both answer 200, with a deadline.

The wait ends at once when the server process dies or its log shows a fatal failure signature
(the signatures catalogue), with `stalled` when the log has not grown for `stall` seconds (a
start-up that stopped progressing: a hang, reported long before the deadline), and with
`timeout` at the deadline (the caller stops the group).
It polls HTTP every 50 ms at first, backing off to 0.5 s (real restarts take minutes; a poll
costs one request over the tunnel's kept-alive connection, and the backoff cap bounds how late
ddprobe notices a healthy server), and looks at the process and its log every
0.1 s at first, backing off to 2 s (each look is one round-trip to the host). Library code
does not print: progress goes to a reporter object the CLI passes in.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import httpx

from ddprobe import httpclients
from ddprobe.server.manager import Peek
from ddprobe.signatures import LogMatch, find_matches
from ddprobe.untrusted import first_chars

LAST_LINE_CAP = 300  # characters of the last log line a health wait shows

ENDPOINTS = ("/health", "/health_generate")
LOG_KEEP = 2 << 20  # bytes of log kept in memory for matching (the tail)


class HealthReporter(Protocol):
    def health(self, elapsed: float, timeout: float, stage: str, last_line: str) -> None: ...


Unhealthy = Literal["died", "fatal", "stalled", "timeout"]  # why a wait ended unhealthy
HealthStatus = Literal["healthy"] | Unhealthy


@dataclass(frozen=True)
class HealthResult:
    status: HealthStatus
    elapsed: float
    stage: str  # the endpoint being polled when it ended
    last_line: str  # the last non-empty log line seen
    log: str  # the log text read during the wait (its tail)
    offset: int  # log offset reached (for a later peek)
    match: LogMatch | None = None  # the fatal signature that ended the wait
    polls: int = 0
    peeks: int = 0

    @property
    def healthy(self) -> bool:
        return self.status == "healthy"


def last_line(text: str) -> str:
    for line in reversed(text.split("\n")):
        # tqdm-style progress lines are rewritten with \r: show their latest state
        s = line.split("\r")[-1].strip() or line.strip()
        if s:
            return first_chars(s, LAST_LINE_CAP)
    return ""


def fatal_match(text: str) -> LogMatch | None:
    """The first catalogued failure of fatal severity in the log, if any."""
    for m in find_matches(text):
        if m.severity == "fatal":
            return m
    return None


def progressed(data: str) -> bool:
    """New log text says the start-up moved on: anything but the access-log lines of our own
    health polls (uvicorn logs each `GET /health`, so a stuck server's log grows by them)."""
    return any(line.strip() and "GET /health" not in line
               for line in data.replace("\r", "\n").split("\n"))


def health_now(base_url: str, *, timeout: float = 30.0,
               client: httpx.Client | None = None) -> str:
    """One look at /health_generate (a one-token generation through the scheduler): ok, error
    (an HTTP error status or a refused connection) or timeout."""
    c = client or httpclients.client()
    try:
        r = c.get(base_url + ENDPOINTS[-1], timeout=httpx.Timeout(timeout, connect=5.0))
        return "ok" if r.status_code == 200 else "error"
    except httpx.TimeoutException:
        return "timeout"
    except httpx.HTTPError:
        return "error"
    finally:
        if client is None:
            c.close()


def wait_healthy(base_url: str, peek: Callable[[int], Peek], *, timeout: float,
                 reporter: HealthReporter | None = None, offset: int = 0,
                 stall: float = 0.0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 client: httpx.Client | None = None) -> HealthResult:
    """Wait until `base_url` is healthy, the process dies, a fatal line is logged, or timeout."""
    t0 = clock()
    deadline = t0 + timeout
    stage_i = 0
    log, line = "", ""
    polls = peeks = 0
    http_every, peek_every = 0.05, 0.1
    next_peek = t0
    grew = t0  # when the log last grew
    listening: bool | None = None
    own = client is None
    c = client or httpclients.client(timeout=httpx.Timeout(10.0, connect=2.0))

    def result(status: HealthStatus, match: LogMatch | None = None) -> HealthResult:
        return HealthResult(status, clock() - t0, ENDPOINTS[min(stage_i, 1)], line, log, offset,
                            match, polls, peeks)

    try:
        while True:
            now = clock()
            if now >= next_peek:
                p = peek(offset)
                peeks += 1
                offset = p.offset
                if p.data:
                    if progressed(p.data):
                        grew = clock()
                    log = (log + p.data)[-LOG_KEEP:]
                    line = last_line(log) or line
                    m = fatal_match(log)
                    if m is not None:
                        return result("fatal", m)
                if not p.alive:
                    return result("died")
                if stall > 0 and clock() - grew >= stall:
                    return result("stalled")
                listening = p.listening
                peek_every = min(peek_every * 1.5, 2.0)
                # until the port listens, the look at the host replaces the HTTP poll
                next_peek = clock() + (min(http_every, peek_every) if listening is False
                                       else peek_every)
            if reporter is not None:
                reporter.health(now - t0, timeout, ENDPOINTS[stage_i], line)
            left = deadline - clock()
            if left <= 0:
                return result("timeout")
            if listening is False:
                sleep(max(0.0, min(deadline - clock(), next_peek - clock())))
                http_every = min(http_every * 1.3, 0.5)
                continue
            try:
                polls += 1
                r = c.get(base_url + ENDPOINTS[stage_i],
                          timeout=httpx.Timeout(max(0.5, min(10.0, left)), connect=2.0))
                if r.status_code == 200:
                    stage_i += 1
                    if stage_i == len(ENDPOINTS):
                        return result("healthy")
                    continue
            except httpx.HTTPError:
                pass
            sleep(max(0.0, min(http_every, deadline - clock(), next_peek - clock())))
            http_every = min(http_every * 1.3, 0.5)
    finally:
        if own:
            c.close()
