"""Host-side helper for the host lock (runs ON the host; standard library only).

Run by `hostside.client` (the program, then its request as JSON, on stdin); prints one JSON line
{"ok": true, "result": ...} or {"ok": false, "error": {"kind": ..., "message": ...}}.
The lock file is created with O_CREAT|O_EXCL, so exactly one of two racing runs gets it.
Ops: lock, unlock, refresh, break.
"""
from __future__ import annotations

import json
import os
import sys
import time

if "OpError" not in globals():  # read standalone; on a host common.py's text comes first
    from ddprobe.hostside.common import OpError, _mkdirs, _read_json, _write_json, main


def op_lock(req):
    path, info = req["path"], req["info"]
    _mkdirs(os.path.dirname(path))
    for _ in range(50):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            holder = _read_json(path)
            if holder is None:
                continue  # released between our open and our read: try again
            if holder == {}:
                # being written by its owner right now (or a torn file): look again shortly
                time.sleep(0.02)
                holder = _read_json(path)
                if holder is None:
                    continue
            return {"acquired": False, "holder": holder or {"owner": "?", "torn": True}}
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(info, fh)
            fh.flush()
            os.fsync(fh.fileno())
        return {"acquired": True, "holder": info}
    raise OpError("io", "could not take the lock %s (it keeps changing)" % path)


def op_unlock(req):
    path, token = req["path"], req["token"]
    holder = _read_json(path)
    if holder is None:
        return {"released": False, "holder": None}
    if holder.get("token") != token:
        return {"released": False, "holder": holder}
    os.unlink(path)
    return {"released": True, "holder": holder}


def op_refresh(req):
    path, token = req["path"], req["token"]
    holder = _read_json(path)
    if not holder or holder.get("token") != token:
        return {"refreshed": False, "holder": holder}
    holder.update(req.get("update") or {})
    _write_json(path, holder)
    return {"refreshed": True, "holder": holder}


def op_break(req):
    """Remove the lock only if it is still the one judged stale (same token), then take it."""
    path, stale = req["path"], req["stale_token"]
    holder = _read_json(path)
    if holder is not None and holder.get("token", None) not in (stale, None) and holder != {}:
        return {"acquired": False, "holder": holder}
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return op_lock(req)


OPS = {"lock": op_lock, "unlock": op_unlock, "refresh": op_refresh, "break": op_break}


if __name__ == "__main__":
    sys.exit(main(sys.argv, OPS))
