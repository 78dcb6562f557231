"""Defaults that more than one layer states, each defined once: the command line shows them in
its help and passes them on, the library takes them as its parameters' defaults."""
from __future__ import annotations

from typing import Final

# the oversize experiment: suspect buffers are first allocated this many times larger
# (bisect/ladder.py escalates to cover the static shortfall, or x16, when that does not cure)
OVERSIZE_FACTOR: Final = 4
MAX_OVERSIZE_FACTOR: Final = 1024  # the largest factor an escalation or --oversize-factor asks

# the probes of a cell (`run`, `probe`, every bisect and sweep cell)
PROBE_SUITE: Final = "coding"  # the bundled coding suite
PROBE_CONCURRENCY: Final = 8  # probe tasks in flight at once (each: a chat and a /generate request)
PROBE_MAX_TOKENS: Final = 512  # new tokens per coding answer
PROBE_TIMEOUT_S: Final = 300.0  # per request
