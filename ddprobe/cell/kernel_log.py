"""The host's kernel log after a crash: the NVIDIA driver's Xid lines are evidence (13/31 a
fault in a kernel, 43 a reset channel, 48/63/64/94/95 ECC, 74 NVLink, 79 off the bus, ...).

One round trip, only for a crashed or hung cell: a stdlib program on the host reads `dmesg
--time-format iso` (or `journalctl -k` where dmesg is restricted) and returns the Xid lines of
the last `window` seconds of the host's own clock. Nothing is read when neither tool can; the
lines are host text (cleaned, capped) and never change the outcome.
"""
from __future__ import annotations

import json
from typing import Final

from ddprobe.remote import Remote
from ddprobe.untrusted import clean

MAX_LINES: Final = 20
_SRC: Final = r"""
import datetime, json, subprocess, sys, time
window = float(sys.argv[1]); now = time.time(); out = []; source = ""
for argv in (["dmesg", "--time-format", "iso"],
             ["journalctl", "-k", "--no-pager", "-o", "short-iso",
              "--since", "@%d" % (now - window)]):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=10, errors="replace")
    except (OSError, subprocess.SubprocessError):
        continue
    if p.returncode != 0:
        continue
    source = argv[0]
    for line in p.stdout.splitlines()[-20000:]:
        if "NVRM: Xid" not in line:
            continue
        stamp = line.split(" ", 1)[0].replace(",", ".")
        try:
            t = datetime.datetime.fromisoformat(stamp).timestamp()
        except ValueError:
            t = None
        if t is None or t >= now - window:
            out.append(line[:400])
    break
print(json.dumps({"source": source, "lines": out[-20:]}))
"""


def recent_xid_lines(r: Remote, window: float) -> tuple[str, list[str]]:
    """(the tool that was read, the Xid lines of the last `window` seconds); ("", []) when the
    kernel log cannot be read."""
    res = r.python(["-c", _SRC, str(max(1.0, window))], timeout=30)
    if not res.ok:
        return "", []
    try:
        doc = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return "", []
    lines = [clean(str(x))[:300] for x in doc.get("lines", [])[-MAX_LINES:]
             if isinstance(x, str)]
    return str(doc.get("source", ""))[:20], lines
