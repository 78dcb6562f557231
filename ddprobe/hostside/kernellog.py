"""The kernel-log program: the NVIDIA driver's Xid lines of the last `window` seconds of the
host's own clock (runs ON the host; standard library only, Python 3.8+).

Reads `dmesg --time-format iso`, or `journalctl -k` where dmesg is restricted; the first that
runs names the source. Op `xid`, request `{"window": seconds}`; result `{"source": "dmesg" |
"journalctl" | "" (neither could be read), "lines": [the last MAX_LINES Xid lines]}`.
"""
from __future__ import annotations

import datetime
import subprocess
import sys
import time

if "OpError" not in globals():  # read standalone; on a host common.py's text comes first
    from ddprobe.hostside.common import main

MAX_LINES = 20
_SCAN_LINES = 20000


def _stamp(line):
    stamp = line.split(" ", 1)[0].replace(",", ".")
    try:
        return datetime.datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def op_xid(req):
    window = max(1.0, float(req["window"]))
    now = time.time()
    for argv in (["dmesg", "--time-format", "iso"],
                 ["journalctl", "-k", "--no-pager", "-o", "short-iso",
                  "--since", "@%d" % (now - window)]):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=10,
                               errors="replace", stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            continue
        if p.returncode != 0:
            continue
        out = []
        for line in p.stdout.splitlines()[-_SCAN_LINES:]:
            if "NVRM: Xid" not in line:
                continue
            t = _stamp(line)
            if t is None or t >= now - window:
                out.append(line[:400])
        return {"source": argv[0], "lines": out[-MAX_LINES:]}
    return {"source": "", "lines": []}


OPS = {"xid": op_xid}


if __name__ == "__main__":
    sys.exit(main(sys.argv, OPS))
