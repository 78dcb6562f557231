"""Host side, part 2: the ledger (`<dir holding the package>/.ddprobe/ledger.json`), file
states, `status` and `diff`. See `sourceops` for the protocol."""
from __future__ import annotations

import datetime
import errno
import fcntl
import glob
import json
import os
import re
import time
from typing import IO

if "atomic_write" not in globals():  # standalone (tests); on a host the parts are concatenated
    from ddprobe.hostside.common import OpError
    from ddprobe.hostside.patchtext import unified_diff
    from ddprobe.hostside.sourceio import (
        LEDGER_VERSION,
        Json,
        _sha_bytes,
        atomic_write,
        heartbeat,
        inside,
        locate,
    )


class Ledger:
    def __init__(self, pkg_dir: str, package: str) -> None:
        self.pkg_dir = pkg_dir
        self.package = package
        self.dir = os.path.join(os.path.dirname(pkg_dir), ".ddprobe")
        self.path = os.path.join(self.dir, "ledger.json")
        self._lock: IO[str] | None = None

    def lock(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        fh = self._lock = open(os.path.join(self.dir, "ledger.lock"), "a")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise OpError("locked", "another ddprobe patch operation holds %s"
                              % os.path.join(self.dir, "ledger.lock")) from None

    def load(self) -> Json:
        try:
            with open(self.path, encoding="utf-8") as fh:
                data: Json = json.load(fh)
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError, RecursionError) as e:
            raise OpError("ledger", "cannot read the ledger %s: %s; `ddprobe patch status` "
                              "shows what the backups allow, `ddprobe patch recover` restores "
                              "from them" % (self.path, e)) from None
        problem = _ledger_problem(data)
        if problem:
            raise OpError("ledger", "the ledger %s is damaged (%s); `ddprobe patch status` "
                              "shows what the backups allow, `ddprobe patch recover` restores "
                              "from them" % (self.path, problem))
        data.setdefault("version", LEDGER_VERSION)
        data.setdefault("entries", [])
        data.setdefault("history", [])
        for entry in self.entries_for(data):  # every path it names, checked before any use
            for f in entry["files"]:
                inside(self.pkg_dir, f["path"], "ledger path")
                inside(os.path.join(self.dir, "backups"),
                       os.path.relpath(f["backup"], os.path.join(self.dir, "backups"))
                       if os.path.isabs(f["backup"]) else f["backup"], "ledger backup")
        return data

    def save(self, data: Json) -> None:
        os.makedirs(self.dir, exist_ok=True)
        atomic_write(self.path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())

    def entries_for(self, data: Json) -> list[Json]:
        return [e for e in data["entries"] if e.get("package_dir") in (None, self.pkg_dir)]

    def backup_path(self, pid: str, rel: str) -> str:
        return os.path.join(self.dir, "backups", pid, rel)


def _ledger_problem(data: object) -> str | None:
    """What is wrong with a ledger's structure (a hand edit, a torn write), or None."""
    if not isinstance(data, dict):
        return "not a JSON object"
    for key in ("entries", "history"):
        if key in data and not isinstance(data[key], list):
            return "%r is not a list" % key
    for i, e in enumerate(data.get("entries", [])):
        if not isinstance(e, dict) or not isinstance(e.get("id"), str):
            return "entries[%d] has no id" % i
        if not isinstance(e.get("files"), list):
            return "entries[%d].files is not a list" % i
        for j, f in enumerate(e["files"]):
            if not isinstance(f, dict):
                return "entries[%d].files[%d] is not an object" % (i, j)
            for k in ("path", "sha_before", "sha_after", "backup"):
                if not isinstance(f.get(k), str):
                    return "entries[%d].files[%d].%s is not a string" % (i, j, k)
    return None


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _remove_pycache(path: str) -> list[str]:
    """Stale bytecode of a changed module: the server must load the patched source."""
    d, name = os.path.split(path)
    stem = os.path.splitext(name)[0]
    removed = []
    for pyc in glob.glob(os.path.join(d, "__pycache__", stem + ".*.pyc")):
        try:
            os.unlink(pyc)
            removed.append(os.path.relpath(pyc, d))
        except OSError:
            pass
    return removed


def _file_bytes(pkg_dir: str, rel: str) -> tuple[bytes | None, int | None]:
    path = inside(pkg_dir, rel)
    try:
        with open(path, "rb") as fh:
            return fh.read(), os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return None, None


def _state_of(current: bytes | None, before: str, after: str) -> str:
    if current is None:
        return "missing"
    h = _sha_bytes(current)
    if h == after:
        return "patched"
    if h == before:
        return "original"
    return "drifted"


# ----- apply ------------------------------------------------------------------------------------


def _open_ledger(req: Json) -> tuple[Json, str, Ledger, Json]:
    """The install of req["package"], its directory, its ledger and the ledger's data."""
    info = locate(req["package"])
    ledger = Ledger(info["path"], info["package"])
    return info, info["path"], ledger, ledger.load()


def op_status(req: Json) -> Json:
    try:
        info, pkg_dir, ledger, data = _open_ledger(req)
    except OpError as e:
        if e.kind not in ("ledger", "path"):
            raise
        info = locate(req["package"])
        ledger = Ledger(info["path"], info["package"])
        return {"entries": [], "history": [], "ledger": ledger.path, "ledger_exists": True,
                "ledger_error": str(e), "backups": _backups(ledger), "install": info}
    out = []
    for entry in ledger.entries_for(data):
        files = []
        for f in entry["files"]:
            cur, _ = _file_bytes(pkg_dir, f["path"])
            files.append({"path": f["path"], "state": _state_of(cur, f["sha_before"],
                                                                f["sha_after"]),
                          "sha_before": f["sha_before"], "sha_after": f["sha_after"],
                          "backup": f["backup"], "backup_ok": os.path.exists(f["backup"])})
        alive = False
        if entry.get("state") == "applying" and entry.get("pid"):
            try:
                os.kill(int(entry["pid"]), 0)
                alive = True
            except OSError as err:
                alive = err.errno == errno.EPERM
        out.append({"id": entry["id"], "state": entry.get("state"),
                    "description": entry.get("description"),
                    "applied_at": entry.get("applied_at"), "who": entry.get("who"),
                    "version": entry.get("version"), "files": files, "in_progress": alive,
                    "source": entry.get("source") or ""})
    return {"entries": out, "history": data.get("history", [])[-20:], "ledger": ledger.path,
            "ledger_exists": os.path.exists(ledger.path), "install": info}


def _backups(ledger: Ledger) -> list[Json]:
    """Every backup file under the ledger's backups/ (what `patch recover` can restore), with
    the state of the file it is the original of."""
    root = os.path.join(ledger.dir, "backups")
    out = []
    for d, _, names in os.walk(root):
        for n in sorted(names):
            if ".drift-" in n:
                continue
            bp = os.path.join(d, n)
            pid, _, rel = os.path.relpath(bp, root).partition(os.sep)
            rel = re.sub(r"\.\d{9,}$", "", rel)  # a second backup of one file: name.<time>
            try:
                cur, _ = _file_bytes(ledger.pkg_dir, rel)
                with open(bp, "rb") as fh:
                    same = cur == fh.read()
                state = "missing" if cur is None else "same as backup" if same else "differs"
            except (OpError, OSError) as e:
                state = "refused: %s" % e
            out.append({"patch": pid, "path": rel, "backup": bp, "state": state,
                        "mtime": os.path.getmtime(bp)})
    return out


def op_recover(req: Json) -> Json:
    """The way out of a damaged ledger: restore every file that has a backup to its oldest
    backup (the original before the first patch), move the damaged ledger aside, start a new
    one. Dry run unless req["apply"]."""
    info = locate(req["package"])
    ledger = Ledger(info["path"], info["package"])
    ledger.lock()
    backups = _backups(ledger)
    oldest: dict[str, Json] = {}
    for b in sorted(backups, key=lambda b: b["mtime"]):
        oldest.setdefault(b["path"], b)
    plan = [b for b in oldest.values() if b["state"] in ("differs", "missing")]
    refused = [b for b in backups if b["state"].startswith("refused")]
    if not req.get("apply"):
        return {"status": "dry-run", "restore": plan, "refused": refused,
                "unchanged": [b for b in oldest.values() if b["state"] == "same as backup"],
                "ledger": ledger.path, "install": info}
    restored = []
    for b in plan:
        path = inside(ledger.pkg_dir, b["path"])
        with open(b["backup"], "rb") as fh:
            original = fh.read()
        heartbeat(b["path"])
        atomic_write(path, original)
        _remove_pycache(path)
        restored.append(b["path"])
    moved = None
    if os.path.exists(ledger.path):
        moved = "%s.damaged-%d" % (ledger.path, int(time.time()))
        os.replace(ledger.path, moved)
    ledger.save({"version": LEDGER_VERSION, "entries": [], "history": [
        {"id": "(recovered)", "state": "recovered", "reverted_at": _now(),
         "reverted_by": req.get("who", "?"), "files": [{"path": p} for p in restored]}]})
    return {"status": "recovered", "restored": restored, "refused": refused,
            "damaged_ledger": moved, "ledger": ledger.path, "install": info}


def op_diff(req: Json) -> Json:
    info, pkg_dir, ledger, data = _open_ledger(req)
    out = []
    for e in ledger.entries_for(data):
        if req.get("id") and e["id"] != req["id"]:
            continue
        diff = ""
        for f in e["files"]:
            cur, _ = _file_bytes(pkg_dir, f["path"])
            try:
                with open(f["backup"], "rb") as fh:
                    orig = fh.read()
            except OSError:
                orig = None
            if orig is None or cur is None:
                diff += "# %s: %s\n" % (f["path"], "backup missing" if orig is None
                                        else "file missing")
                continue
            diff += unified_diff(f["path"], orig.decode("utf-8", "surrogateescape"),
                                 cur.decode("utf-8", "surrogateescape"))
        out.append({"id": e["id"], "state": e.get("state"), "diff": diff})
    return {"patches": out, "install": info}


# ----- grep -----------------------------------------------------------------------------------
