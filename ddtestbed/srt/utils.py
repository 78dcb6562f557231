"""Runtime helpers: SGLang-style logging, the simulated clock, dying like SGLang's processes."""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

SCHEDULER_THREAD = "scheduler-TP0"
CLOCK_LINE = "Testbed clock: simulated"  # not an SGLang line: ddprobe never reads it


class _RankPrefix(logging.Filter):
    """SGLang's scheduler runs in its own process and logs with a ' TP0' prefix."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = " TP0" if threading.current_thread().name == SCHEDULER_THREAD else ""
        return True


def configure_logger(log_level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s%(rank)s] %(message)s",
                                          datefmt="%Y-%m-%d %H:%M:%S"))
    handler.addFilter(_RankPrefix())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, log_level.upper()))


class SimClock:
    """Simulated GPU time. Work "runs on the GPU" while Python does its own work, so a step
    costs max(python time, simulated time), like an asynchronous device."""

    def __init__(self, scale: float, startup_scale: float) -> None:
        self.scale, self.startup_scale = scale, startup_scale

    def startup_sleep(self, seconds: float, what: str = "") -> None:
        """Sleep a start-up duration (scaled). The testbed's own clock logs the unscaled
        seconds (`CLOCK_LINE`), so a benchmark can add up a start-up at scale 1."""
        if seconds > 0:
            logging.getLogger(__name__).info(f"{CLOCK_LINE} {seconds:.3f} s {what}".rstrip())
        if seconds > 0 and self.startup_scale > 0:
            time.sleep(seconds * self.startup_scale)

    def until(self, start: float, seconds: float) -> None:
        """Sleep until `start + seconds` (scaled), measured on the monotonic clock."""
        remaining = start + seconds * self.scale - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)


def die_like_sglang(logger: logging.Logger) -> None:
    """SGLang's scheduler sends SIGQUIT to its parent, which kills the whole process tree."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    os.kill(os.getpid(), signal.SIGQUIT)
    time.sleep(5.0)  # the main thread's handler normally ends the process before this
    _kill_self()


def install_sigquit_handler(logger: logging.Logger) -> None:
    def on_sigquit(signum: int, frame: object) -> None:
        logger.error("Received sigquit from a child process. It usually means the child failed.")
        _kill_self()

    signal.signal(signal.SIGQUIT, on_sigquit)


def _kill_self() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def sleep_forever() -> None:
    threading.Event().wait()
