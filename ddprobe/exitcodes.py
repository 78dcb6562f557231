"""Every exit code ddprobe uses, in one place (documented in README.md)."""
from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import Final


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # a probe/cell failed, or a bisect found a bad config
    USAGE = 2  # bad command-line usage (typer/click default)
    CONFIG = 3  # inventory, playbook, scenario or other configuration invalid
    UNREACHABLE = 4  # host unreachable, auth or host-key failure
    SERVER = 5  # server failed to start / become ready (infrastructure side)
    INCONCLUSIVE = 6  # bisect could not decide
    REFUSED = 7  # the server (or the flags check) refused the config
    CRASH = 8  # smoke: the server crashed
    GARBAGE = 9  # smoke: output is wrong
    DEGRADED = 10  # smoke: throughput below threshold
    HANG = 11  # smoke: the server never became healthy
    LOCKED = 12  # the host is locked by another ddprobe run
    PATCH = 13  # a patch could not be applied / reverted
    FIXED = 14  # bisect --confirm-patch fixed every failure mode found (the patch stays applied)
    INTERNAL = 70  # a bug in ddprobe
    BISECT_SKIP = 125  # git bisect run protocol: skip
    BISECT_ABORT = 128  # git bisect run protocol: abort (ddprobe cannot run: usage, config)
    INTERRUPTED = 130
    CLOSED_PIPE = 141  # stdout's reader went away (`| head -1`): 128 + SIGPIPE, as the shell's


# A cell's outcome (ddprobe.results.Outcome, a str enum) -> the exit code of `run`, `smoke` and
# `classify`: the one table (an outcome string looks up the same entry as its enum member).
OUTCOME_EXIT: Final[Mapping[str, ExitCode]] = MappingProxyType({
    "ok": ExitCode.OK, "crash": ExitCode.CRASH, "garbage": ExitCode.GARBAGE,
    "degraded": ExitCode.DEGRADED, "hang": ExitCode.HANG, "refused": ExitCode.REFUSED,
    "error": ExitCode.SERVER})


def for_outcome(outcome: str) -> ExitCode:
    """The exit code of one cell outcome ('ok', 'crash', ... or an Outcome member)."""
    return OUTCOME_EXIT[outcome]
