"""Defaults that more than one layer states, each defined once: the command line shows them in
its help and passes them on, the library takes them as its parameters' defaults."""
from __future__ import annotations

from typing import Final

# the oversize experiment: suspect buffers are first allocated this many times larger
# (bisect/ladder.py escalates to cover the static shortfall, or x16, when that does not cure)
OVERSIZE_FACTOR: Final = 4
MAX_OVERSIZE_FACTOR: Final = 1024  # the largest factor an escalation or --oversize-factor asks
