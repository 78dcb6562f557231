"""Ctrl-C at any moment leaves nothing behind, and says what it cleaned up (issue 15).

SIGINT raises KeyboardInterrupt in the main thread only. Cells of a multi-host round run in
worker threads: `request_stop()` (called by the CLI boundary when Ctrl-C arrives) makes each
worker raise KeyboardInterrupt once, at its next host command (`checkpoint()` in Remote.run),
so every cell unwinds through its own cleanup (stop the half-started server, revert the
temporary patch, release the lock) instead of running to the end. The cleanup code records
what it did with `cleaned()`; the CLI prints it with the command that resumes the run.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_stop = threading.Event()
_delivered: set[int] = set()  # threads that already got their KeyboardInterrupt
_lock = threading.Lock()
_cleaned: list[str] = []
_resume: list[str] = []  # the command that resumes the interrupted run, if any


def reset() -> None:
    _stop.clear()
    with _lock:
        _delivered.clear()
        _cleaned.clear()
        _resume.clear()


def request_stop() -> None:
    _stop.set()


def stopping() -> bool:
    return _stop.is_set()


def checkpoint() -> None:
    """In a worker thread after Ctrl-C: raise KeyboardInterrupt once (then let its cleanup
    run commands freely). In the main thread SIGINT itself raises it."""
    if not _stop.is_set() or threading.current_thread() is threading.main_thread():
        return
    me = threading.get_ident()
    with _lock:
        if me in _delivered:
            return
        _delivered.add(me)
    raise KeyboardInterrupt


def cleaned(text: str) -> None:
    """Record one thing the interrupted run put back (shown when it exits)."""
    if not _stop.is_set():
        return
    with _lock:
        if text not in _cleaned:
            _cleaned.append(text)


def set_resume(command: str) -> None:
    with _lock:
        _resume[:] = [command]


def clear_resume() -> None:
    with _lock:
        _resume.clear()


def report() -> tuple[list[str], str | None]:
    with _lock:
        return list(_cleaned), (_resume[0] if _resume else None)


def _on_sigint(signum: int, frame: object) -> None:
    request_stop()
    raise KeyboardInterrupt


@contextlib.contextmanager
def handling_sigint() -> Iterator[None]:
    """For the CLI: Ctrl-C raises KeyboardInterrupt as usual and also tells worker threads."""
    reset()
    old = None
    if threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError):
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                old = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)


def message() -> str:
    """The line printed when Ctrl-C ends a command: what was put back, how to resume."""
    done, resume = report()
    text = "interrupted"
    text += (": " + "; ".join(done)) if done else ": nothing was left running on any host"
    if resume:
        text += f". Resume with `{resume}`"
    return text


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Run cleanup without a second Ctrl-C cutting it short (main thread only; it is
    short: a stop, a revert, an unlock)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
