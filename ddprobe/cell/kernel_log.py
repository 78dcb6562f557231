"""The host's kernel log after a crash: the NVIDIA driver's Xid lines are evidence (13/31 a
fault in a kernel, 43 a reset channel, 48/63/64/94/95 ECC, 74 NVLink, 79 off the bus, ...).

One round trip, only for a crashed or hung cell: the host program `hostside/kernellog.py`
(through `hostside.client`) reads `dmesg --time-format iso` (or `journalctl -k` where dmesg is
restricted) and returns the Xid lines of the last `window` seconds of the host's own clock.
Nothing is read when neither tool can, or the program gives no usable answer; the lines are
host text (cleaned, capped) and never change the outcome.
"""
from __future__ import annotations

from typing import Final

from ddprobe.errors import RemoteCommandError
from ddprobe.hostside.client import call
from ddprobe.hostside.errors import HostOpError
from ddprobe.remote import Remote
from ddprobe.untrusted import clean, first_chars

SOURCE_CAP: Final = 20  # characters of the kernel log's source name (dmesg, journalctl)
XID_LINE_CAP: Final = 300  # characters of each kernel-log line kept

MAX_LINES: Final = 20


def recent_xid_lines(r: Remote, window: float) -> tuple[str, list[str]]:
    """(the tool that was read, the Xid lines of the last `window` seconds); ("", []) when the
    kernel log cannot be read."""
    try:
        doc = call(r, "xid", {"window": max(1.0, window)}, program="kernel_log")
    except (HostOpError, RemoteCommandError):
        return "", []
    raw = doc.get("lines")
    lines = [first_chars(clean(x), XID_LINE_CAP)
             for x in (raw if isinstance(raw, list) else [])[-MAX_LINES:] if isinstance(x, str)]
    source = doc.get("source")
    return (first_chars(clean(source), SOURCE_CAP) if isinstance(source, str) else ""), lines
