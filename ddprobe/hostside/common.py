"""Shared part of the server programs (`ops.py`, `lock.py`): runs ON the host, standard
library only. `hostside.client.program_source` puts this text in front of a program's own text,
so each is still one `python -c SRC OP` program with its request as JSON on stdin, and
prints one JSON line {"ok": true, "result": ...} or {"ok": false, "error": {...}}."""
from __future__ import annotations

import errno
import json
import os
import sys


class OpError(Exception):
    def __init__(self, kind, message, **extra):
        super().__init__(message)
        self.kind, self.extra = kind, extra


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except ValueError:
        return {}


def _write_json(path, data):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    # 0600: state files name the server's command line and who ran it (shared hosts)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _mkdirs(path):
    os.makedirs(path, exist_ok=True)


def main(argv, ops):
    op = argv[1] if len(argv) > 1 else ""
    try:
        if op not in ops:
            raise OpError("bad_request", "unknown op %r" % op)
        req = json.loads(sys.stdin.read() or "{}")
        res = {"ok": True, "result": ops[op](req)}
    except OpError as e:
        res = {"ok": False, "error": dict(e.extra, kind=e.kind, message=str(e))}
    except OSError as e:
        kind = "disk" if e.errno in (errno.ENOSPC, errno.EDQUOT) else "io"
        res = {"ok": False, "error": {"kind": kind, "message": "%s: %s" % (
            getattr(e, "filename", "") or "", e.strerror or e)}}
    except (KeyError, ValueError, TypeError) as e:
        res = {"ok": False, "error": {"kind": "bad_request", "message": repr(e)}}
    sys.stdout.write(json.dumps(res) + "\n")
    sys.stdout.flush()
    return 0
