"""The one protocol of every host program: runs ON the host, standard library only.

`hostside.client` sends a program as ONE text (this module first, then the program's own
modules) on stdin, then the request, a JSON object (`python -c BOOT OP`, see the client). `main`
is the one main loop: it reads the request, runs the op's function, and writes the ONE answer
line, the last stdout line: `{"ok": true, "result": ...}` or
`{"ok": false, "error": {"kind": K, "message": M, ...}}` (K is looked up in
`hostside.errors.ERRORS` by the client). Lines before it are progress (`{"progress": ...}`)
or stray output. The process exits 0 whenever it answered.

The kinds this loop itself gives: `bad_request` (an unknown op, a request that is not a JSON
object, a missing or mistyped field: ddprobe's own bug) and, for an OSError, the program's
`oserror_kind(op, error)` (by default `disk` for ENOSPC/EDQUOT, else `io`). An exception
with a `to_error()` method (patchtext's PatchTextError) answers what that returns. The loop
also drops the cwd that `-c` puts first on sys.path: a stray ./sglang in the home directory
must not shadow the install.
"""
from __future__ import annotations

import errno
import json
import os
import sys


class OpError(Exception):
    """An op's refusal or failure, answered as `{"kind": kind, "message": ..., **extra}`."""

    def __init__(self, kind, message, **extra):
        Exception.__init__(self, message)
        self.kind, self.extra = kind, extra


# ----- output -----------------------------------------------------------------------------------

_CALLER_GONE: list[bool] = []  # set once a write to the caller failed


def emit(obj):
    """One JSON line to the caller. Once the caller is gone (ddprobe killed, ssh dropped), an
    answer is dropped (the op has done its work; the ledger has the outcome); a progress
    line raises, so a caller of `heartbeat` can notice."""
    if _CALLER_GONE and "progress" not in obj:
        return
    try:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        if "progress" in obj:
            raise
        _CALLER_GONE.append(True)


# ----- JSON state files -------------------------------------------------------------------------

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


# ----- the main loop ----------------------------------------------------------------------------

def _read_request():
    raw = sys.stdin.read()
    try:
        req = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError) as e:
        raise OpError("bad_request", "the request is not JSON: %s" % e) from None
    if not isinstance(req, dict):
        raise OpError("bad_request", "the request is not a JSON object")
    return req


def disk_or_io(op, e):
    """The default kind of an OSError: `disk` for a full disk or quota, else `io`."""
    return "disk" if e.errno in (errno.ENOSPC, errno.EDQUOT) else "io"


def _oserror(op, e, oserror_kind):
    # a full disk, a read-only or odd path: one clear error, not a traceback (issue 15)
    what = "%s%s" % (e.strerror or type(e).__name__,
                     (": %s" % e.filename) if getattr(e, "filename", None) else "")
    return {"kind": (oserror_kind or disk_or_io)(op, e),
            "message": "%s failed: %s" % (op, what), "errno": e.errno}


def answer_for(op, e, oserror_kind=None):
    """The error answer for an exception an op raised; None for one that is not an answer
    (a bug: its traceback goes to stderr and the client reports a program without answer)."""
    if isinstance(e, OpError):
        err = dict(e.extra)
        err.update(kind=e.kind, message=str(e))
        return err
    to_error = getattr(e, "to_error", None)  # e.g. patchtext.PatchTextError
    if callable(to_error):
        return to_error()
    if isinstance(e, OSError):
        return _oserror(op, e, oserror_kind)
    if isinstance(e, (KeyError, ValueError, TypeError)) and not isinstance(e, UnicodeError):
        # a missing or mistyped request field (a file the op read that does not decode is
        # not the request's fault: it stays a program without answer)
        return {"kind": "bad_request", "message": "%s: bad request: %r" % (op, e)}
    return None


def main(argv, ops, oserror_kind=None):
    """Run the op `argv[1]` of a program (`ops`: op -> function(request) -> result) and write
    its one answer line; 0 once answered."""
    if sys.path and sys.path[0] in ("", os.getcwd()):
        sys.path.pop(0)
    op = argv[1] if len(argv) > 1 else ""
    try:
        fn = ops.get(op)
        if fn is None:
            raise OpError("bad_request",
                          "unknown op %r (ops: %s)" % (op, ", ".join(sorted(ops))))
        emit({"ok": True, "result": fn(_read_request())})
    except Exception as e:  # every answer is made here
        err = answer_for(op, e, oserror_kind)
        if err is None:
            raise
        emit({"ok": False, "error": err})
    return 0
