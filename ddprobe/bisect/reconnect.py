"""A dropped SSH connection never becomes a result (issue 15).

When the connection to a host dies while a cell runs (the sshd child killed, a network blip,
a rebooted bastion), whatever the cell saw afterwards (a health wait through a dead tunnel,
probes that all fail, a log that cannot be read) says nothing about SGLang. The executor
discards that result, reconnects here with a bounded exponential backoff, re-takes the run's
lock on the new connection, and runs the cell again. When the host does not come back
within the budget the run stops unfinished (`HostGone`), so `--resume` runs the cell later.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ddprobe.errors import HostGone, LockedError, RemoteError
from ddprobe.remote import connect

if TYPE_CHECKING:
    from ddprobe.bisect.session import HostSession

log = logging.getLogger("ddprobe.reconnect")
# seconds to keep trying to reach a host that dropped (env: tests make it short)
RECONNECT_ENV = "DDPROBE_RECONNECT_TIMEOUT"
DEFAULT_BUDGET_S = 120.0
RETRIES_PER_CELL = 2  # a cell whose connection drops this often in a row stops the run


def budget_s() -> float:
    try:
        return max(0.0, float(os.environ.get(RECONNECT_ENV, DEFAULT_BUDGET_S)))
    except ValueError:
        return DEFAULT_BUDGET_S


def delays(budget: float, first: float = 1.0, cap: float = 15.0) -> list[float]:
    """1, 2, 4, 8, 15, 15... seconds, summing to at most `budget`."""
    out: list[float] = []
    d, total = first, 0.0
    while total + d <= budget:
        out.append(d)
        total += d
        d = min(cap, d * 2)
    if budget - total > 0.05:
        out.append(round(budget - total, 3))
    return out


def reconnect(s: HostSession, *, why: str, progress: Callable[[str], None] | None = None,
              budget: float | None = None) -> str:
    """Replace s.r with a fresh connection and re-take the run's lock on it; returns a note.
    Raises HostGone when the host stays unreachable for the whole budget."""
    say = progress or (lambda text: None)
    with contextlib.suppress(Exception):
        s.r.close()
    budget = budget_s() if budget is None else budget
    t0 = time.monotonic()
    last = "no attempt"
    for n, d in enumerate([0.0, *delays(budget)], 1):
        if d:
            say(f"{s.host.name}: connection lost ({why}); reconnecting in {d:.0f}s "
                f"(attempt {n})")
            time.sleep(d)
        try:
            r = connect(s.host, s.opts)  # the session's options
        except RemoteError as e:
            last = str(e)
            log.debug("%s: reconnect attempt %d failed: %s", s.host.name, n, e)
            continue
        s.r = r
        if s.lock is not None:
            s.lock.r = r
            if not s.lock.still_held():
                raise LockedError(f"{s.host.name}: the run's lock was taken by another run "
                                  f"while the connection was down; stopping")
        took = time.monotonic() - t0
        return f"{s.host.name}: ssh connection lost ({why}); reconnected after {took:.0f}s"
    raise HostGone(f"{s.host.name}: the ssh connection dropped ({why}) and the host did not "
                   f"come back within {budget:.0f}s (last error: {last})")
