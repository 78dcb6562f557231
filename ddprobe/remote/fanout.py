"""Fan-out: one function on many hosts in parallel, bounded, with a per-host deadline."""
from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ddprobe.errors import AuthError, DdprobeError, HostKeyError, RemoteError, RemoteTimeout
from ddprobe.inventory import Host

T = TypeVar("T")


@dataclass
class HostOutcome(Generic[T]):
    host: Host
    status: str  # ok | failed | unreachable | host key | auth | timeout
    value: T | None = None
    error: str | None = None
    duration: float = 0.0
    exc: BaseException | None = field(default=None, repr=False)


class _Deadline(Exception):
    """fan_out's own deadline passed (not a TimeoutError raised by the function)."""


def _result(fut: Future[T], left: float | None) -> T:
    try:
        return fut.result(timeout=left)
    except FutureTimeout:
        # concurrent.futures.TimeoutError is the builtin TimeoutError only from 3.11 on; on
        # 3.10 `except TimeoutError` missed it and a hung host was "failed" (issue 13)
        if fut.done():
            raise  # fn itself raised TimeoutError
        raise _Deadline() from None


def fan_out(hosts: Sequence[Host], fn: Callable[[Host], T], *, max_workers: int = 8,
            deadline: float | None = None) -> list[HostOutcome[T]]:
    """Run fn(host) on many hosts in parallel, bounded, with a per-host deadline. A host's failure
    never stops the others (unlike fabric's ThreadingGroup: unbounded threads, no join timeout).
    fn runs in a copy of the caller's contextvars context, so `ddprobe.context.current()` there
    is the caller's Context."""
    results: list[HostOutcome[T]] = [HostOutcome(h, "timeout") for h in hosts]
    if not hosts:
        return results
    pool = ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(hosts))),
                              thread_name_prefix="ddprobe-host")
    starts: dict[int, float] = {}

    def wrapped(i: int, h: Host) -> T:
        starts[i] = time.monotonic()
        return fn(h)

    # each worker runs in a copy of the caller's contextvars (threads inherit none): the
    # invocation's Context (`ddprobe.context.current()`) is the one a worker sees
    futs: list[Future[T]] = [pool.submit(contextvars.copy_context().run, wrapped, i, h)
                             for i, h in enumerate(hosts)]
    t_begin = time.monotonic()
    for i, fut in enumerate(futs):
        try:
            left = None if deadline is None else max(0.0, deadline - (time.monotonic() -
                                                                     starts.get(i, t_begin)))
            val = _result(fut, left)
            results[i] = HostOutcome(hosts[i], "ok", val, duration=time.monotonic() -
                                     starts.get(i, t_begin))
        except _Deadline:
            results[i] = HostOutcome(hosts[i], "timeout", error=f"no answer within {deadline}s",
                                     duration=deadline or 0.0)
        except (RemoteTimeout, TimeoutError) as e:  # fn's own timeout (a socket, a command)
            results[i] = HostOutcome(hosts[i], "timeout", error=str(e) or type(e).__name__,
                                     exc=e, duration=time.monotonic() - starts.get(i, t_begin))
        except RemoteError as e:  # what `hosts --check` says: host key / auth / unreachable
            status = "host key" if isinstance(e, HostKeyError) else \
                "auth" if isinstance(e, AuthError) else "unreachable"
            results[i] = HostOutcome(hosts[i], status, error=str(e), exc=e,
                                     duration=time.monotonic() - starts.get(i, t_begin))
        except DdprobeError as e:
            results[i] = HostOutcome(hosts[i], "failed", error=str(e), exc=e,
                                     duration=time.monotonic() - starts.get(i, t_begin))
        except Exception as e:
            results[i] = HostOutcome(hosts[i], "failed", error=f"{type(e).__name__}: {e}", exc=e,
                                     duration=time.monotonic() - starts.get(i, t_begin))
    pool.shutdown(wait=False, cancel_futures=True)
    return results
