"""Host-side helper for the server managers (runs ON the host; standard library only).

Run by `hostside.client` (the program, then its request as JSON, on stdin); prints one JSON line
{"ok": true, "result": ...} or {"ok": false, "error": {"kind": ..., "message": ...}}.
Nothing here imports the server's package, and no request value is ever pasted into shell text:
the detached start runs a fixed `sh -c` recipe whose every input is a positional argument.

Ops: start, stop, status, tail, port (the lock's ops are in lock.py; the frequent
liveness + log peek of a health wait is plain `sh`, see command.py).
Kinds of error: port_in_use, disk, running, io, bad_request.
"""
from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

if "OpError" not in globals():  # read standalone; on a host common.py's text comes first
    from ddprobe.hostside.common import OpError, _mkdirs, _read_json, _write_json, main

# docs/notes/remote-and-ci.md section 3.6: a background job under a non-interactive `sh -c` is not a
# group leader, so `setsid` does not fork and `$$` of the inner shell is the new session and
# process-group id. All three streams are redirected so the SSH channel is never held open.
# The pgid is written to a temp file and renamed, so a reader never sees half a number.
RECIPE = (
    'pgidf=$1; log=$2; shift 2\n'
    'setsid sh -c \'echo $$ > "$0.tmp" && mv -f -- "$0.tmp" "$0" && exec "$@"\' '
    '"$pgidf" "$@" > "$log" 2>&1 < /dev/null &\n'
)
MIN_FREE_BYTES = 16 * 1024 * 1024
MARKER_VAR = "DDPROBE_SERVER_MARKER"


# ----- processes ---------------------------------------------------------------------------------

def _procs():
    """(pid, state, pgrp, sid) of every process, from /proc (Linux)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as fh:
                raw = fh.read().decode("ascii", "replace")
        except OSError:
            continue
        rest = raw.rsplit(")", 1)[-1].split()
        if len(rest) < 4:
            continue
        out.append((int(name), rest[0], int(rest[2]), int(rest[3])))
    return out


def _has_marker(pid, marker):
    try:
        with open("/proc/%d/environ" % pid, "rb") as fh:
            env = fh.read()
    except OSError:
        return False
    return ("%s=%s" % (MARKER_VAR, marker)).encode() in env.split(b"\0")


def members(pgid, marker=None):
    """Live processes of the server: its process group / session, plus any process that
    carries its marker (a child that escaped with its own setsid)."""
    if not pgid:
        return []
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except (ProcessLookupError, PermissionError):
            return []
    me = os.getpid()
    pids = []
    for pid, state, pgrp, sid in _procs():
        if state in ("Z", "X") or pid == me:
            continue
        if pgrp == pgid or sid == pgid or (marker and _has_marker(pid, marker)):
            pids.append(pid)
    return sorted(pids)


def _signal_all(pgid, pids, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_gone(pgid, marker, seconds):
    end = time.monotonic() + seconds
    delay = 0.01
    while True:
        left = members(pgid, marker)
        if not left or time.monotonic() >= end:
            return left
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)


def _gpu_pids():
    """PIDs holding a GPU (nvidia-smi), or None where there is no nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        res = subprocess.run([smi, "--query-compute-apps=pid", "--format=csv,noheader"],
                             stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0:
        return None
    return sorted({int(w) for w in res.stdout.decode("ascii", "replace").split() if w.isdigit()})


# ----- ports -------------------------------------------------------------------------------------

def _connect_host(bind):
    if bind in ("", "0.0.0.0"):
        return "127.0.0.1"
    if bind in ("::", "[::]"):
        return "::1"
    return bind.strip("[]")


def port_busy(bind, port):
    """True when something listens on (bind, port) or the server could not bind it."""
    host = _connect_host(bind)
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        pass
    addr = bind.strip("[]") if bind else "0.0.0.0"
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, port))
        return False
    except OSError as e:
        return e.errno == errno.EADDRINUSE
    finally:
        s.close()


def _listeners(port):
    """(pid, command line) of this user's processes listening on the port (best effort)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh, None)
                for line in fh:
                    f = line.split()
                    if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(f[9])
        except OSError:
            continue
    found: list[list[object]] = []  # [pid, command line]
    if not inodes:
        return found
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % name)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink("/proc/%s/fd/%s" % (name, fd))
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                try:
                    with open("/proc/%s/cmdline" % name, "rb") as fh:
                        cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
                except OSError:
                    cmd = ""
                found.append([int(name), cmd[:200]])
                break
    return found


def _wait_port_free(bind, port, seconds):
    end = time.monotonic() + seconds
    delay = 0.01
    while port_busy(bind, port):
        if time.monotonic() >= end:
            return False
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)
    return True


# ----- files -------------------------------------------------------------------------------------


# ----- ops ---------------------------------------------------------------------------------------

def op_port(req):
    busy = port_busy(req.get("bind", "127.0.0.1"), int(req["port"]))
    return {"busy": busy, "listeners": _listeners(int(req["port"])) if busy else []}


def _refuse_start(state_path, log, bind, port):
    """OpError when a start cannot succeed: our server still runs, no disk, the port is taken."""
    old = _read_json(state_path)
    if old and members(old.get("pgid"), old.get("marker")):
        raise OpError("running", "a server started by ddprobe is still running (pgid %s, %s); "
                      "stop it first" % (old.get("pgid"), old.get("config_key", "?")))
    free = shutil.disk_usage(os.path.dirname(log)).free
    if free < MIN_FREE_BYTES:
        raise OpError("disk", "only %d KiB free in %s: cannot write the server log"
                      % (free // 1024, os.path.dirname(log)))
    if port_busy(bind, port):
        who = _listeners(port)
        what = "; ".join("pid %d: %s" % (p, c) for p, c in who) or "a process ddprobe cannot see"
        raise OpError("port_in_use", "port %d (%s) is already in use on the host by %s"
                      % (port, bind or "*", what), listeners=who)


def _start_setsid(argv, env, cwd, pgidf, log):
    """Start through RECIPE (setsid + sh); the pgid the detached shell records."""
    res = subprocess.run(["sh", "-c", RECIPE, "sh", pgidf, log] + argv, env=env, cwd=cwd,
                         stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    if res.returncode != 0:
        raise OpError("io", "the start recipe failed (exit %d): %s" % (
            res.returncode, res.stderr.decode("utf-8", "replace").strip()[-300:]))
    end = time.monotonic() + 15
    delay = 0.002
    while not os.path.exists(pgidf):
        if time.monotonic() > end:
            raise OpError("io", "the server did not record its process group within 15 s "
                          "(see %s)" % log)
        time.sleep(delay)
        delay = min(delay * 1.5, 0.05)
    with open(pgidf) as fh:
        return int(fh.read().strip())


def _start_popen(argv, env, cwd, pgidf, log):
    """No setsid(1): the same detachment from Python (new session, all streams redirected)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    pgid = proc.pid
    with open(pgidf, "w") as fh:
        fh.write("%d\n" % pgid)
    return pgid


def op_start(req):
    state_path, log, pgidf = req["state"], req["log"], req["pgidfile"]
    bind, port = req.get("bind", "127.0.0.1"), int(req["port"])
    for d in {os.path.dirname(state_path), os.path.dirname(log), os.path.dirname(pgidf)}:
        _mkdirs(d)
    _refuse_start(state_path, log, bind, port)
    env = dict(os.environ)
    env.update(req.get("env") or {})
    env[MARKER_VAR] = req["marker"]
    argv = [str(a) for a in req["argv"]]
    for p in (pgidf, pgidf + ".tmp"):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
    cwd = req.get("cwd") or None
    t0 = time.time()
    start = _start_setsid if shutil.which("setsid") and shutil.which("sh") else _start_popen
    pgid = start(argv, env, cwd, pgidf, log)
    state = {"pgid": pgid, "marker": req["marker"], "argv": req.get("argv_record") or argv,
             "log": log, "port": port,
             "bind": bind, "started": t0, "config_key": req.get("config_key", ""),
             "config": req.get("config") or {}, "env_keys": sorted((req.get("env") or {}))}
    _write_json(state_path, state)
    return state


def op_stop(req):
    state_path = req["state"]
    grace = float(req.get("grace", 30.0))
    st = _read_json(state_path)
    t0 = time.monotonic()
    out = {"was_running": False, "pids": [], "signals": [], "left": [], "gpu_pids": [],
           "port_free": None, "gpu_checked": False, "state": st}
    if st:
        pgid, marker = st.get("pgid"), st.get("marker")
        pids = members(pgid, marker)
        out["pids"] = pids
        if pids:
            out["was_running"] = True
            _signal_all(pgid, pids, signal.SIGTERM)
            out["signals"].append("TERM")
            left = _wait_gone(pgid, marker, grace)
            if left:
                _signal_all(pgid, left, signal.SIGKILL)
                out["signals"].append("KILL")
                left = _wait_gone(pgid, marker, 10.0)
            out["left"] = left
        port = st.get("port")
        if port:
            out["port_free"] = _wait_port_free(st.get("bind", "127.0.0.1"), int(port), 10.0)
        gpu = _gpu_pids()
        if gpu is not None:
            out["gpu_checked"] = True
            ours = set(out["pids"])
            end = time.monotonic() + 10.0
            while ours & set(gpu) and time.monotonic() < end:
                time.sleep(0.2)
                gpu = _gpu_pids() or []
            out["gpu_pids"] = sorted(ours & set(gpu))
        if not out["left"]:
            # keep the record as the last server's (its log stays readable after a stop)
            try:
                os.replace(state_path, req.get("last") or state_path + ".last")
            except FileNotFoundError:
                pass
    out["elapsed"] = time.monotonic() - t0
    return out


def op_status(req):
    st = _read_json(req["state"])
    out = {"state": st, "pids": [], "running": False, "log_size": None, "port_busy": None,
           "last": None if st else _read_json(req.get("last") or "/nonexistent")}
    port = int(req.get("port") or (st or {}).get("port") or 0)
    bind = req.get("bind") or (st or {}).get("bind") or "127.0.0.1"
    if st:
        out["pids"] = members(st.get("pgid"), st.get("marker"))
        out["running"] = bool(out["pids"])
        try:
            out["log_size"] = os.path.getsize(st.get("log", ""))
        except OSError:
            pass
    if port:
        out["port_busy"] = port_busy(bind, port)
    out["now"] = time.time()
    return out


def op_tail(req):
    """The last `lines` lines of a file (or all), reading at most `max` bytes from its end."""
    path, lines, cap = req["path"], req.get("lines"), int(req.get("max", 4 << 20))
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            fh.seek(max(0, size - cap))
            data = fh.read()
    except FileNotFoundError:
        raise OpError("io", "no such log on the host: %s" % path) from None
    text = data.decode("utf-8", "replace")
    if size > cap:
        text = text.split("\n", 1)[-1]
    if lines is not None:
        text = "\n".join(text.splitlines()[-int(lines):]) + ("\n" if text else "")
    return {"text": text, "size": size}


OPS = {"start": op_start, "stop": op_stop, "status": op_status, "tail": op_tail,
       "port": op_port}


if __name__ == "__main__":
    sys.exit(main(sys.argv, OPS))
