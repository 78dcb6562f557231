"""Host side, part 3: apply and revert, atomic per file and all or nothing across files.
See `sourceops` for the protocol."""
from __future__ import annotations

import os
import socket
import time

if "Ledger" not in globals():  # standalone (tests); on a host the parts are concatenated
    from ddprobe.hostside.common import OpError
    from ddprobe.hostside.ledger import Ledger, _file_bytes, _now, _remove_pycache, _state_of
    from ddprobe.hostside.patchtext import (
        Patch,
        PatchTextError,
        apply_file,
        parse_patch,
        unified_diff,
    )
    from ddprobe.hostside.sourceio import (
        Json,
        Write,
        _detach_from_caller,
        _sha_bytes,
        atomic_write,
        heartbeat,
        inside,
        locate,
    )


def _plan(patch: Patch, pkg_dir: str, force: bool) -> list[Json]:
    """Per file: current bytes, state, and the patched bytes. Raises before anything changes."""
    plan = []
    for fp in patch.files:
        data, mode = _file_bytes(pkg_dir, fp.path)
        if data is None:
            raise OpError("missing", "%s: file not found in this version (patch %s)"
                              % (fp.path, patch.id), path=fp.path)
        text = data.decode("utf-8", "surrogateescape")
        try:
            new = apply_file(text, fp, source=patch.source).encode("utf-8", "surrogateescape")
            state = "original"
        except PatchTextError as fwd:
            try:
                orig = apply_file(text, fp.reversed()).encode("utf-8", "surrogateescape")
            except PatchTextError:
                raise OpError("mismatch", str(fwd), path=fp.path, hunk=fwd.hunk) from None
            plan.append({"path": fp.path, "state": "patched", "before": orig, "after": data,
                         "mode": mode})
            continue
        want = patch.expected_sha(fp.path)
        if want and _sha_bytes(data) != want and not force:
            raise OpError("edited", "%s: sha256 is %s, not the original this patch was made "
                              "for (%s): someone edited it; use --force to apply anyway"
                              % (fp.path, _sha_bytes(data)[:12], want[:12]), path=fp.path)
        plan.append({"path": fp.path, "state": state, "before": data, "after": new,
                     "mode": mode})
    return plan


def _write_backup(ledger: Ledger, pid: str, rel: str, data: bytes) -> str:
    bp = ledger.backup_path(pid, rel)
    os.makedirs(os.path.dirname(bp), exist_ok=True)
    if os.path.exists(bp):
        with open(bp, "rb") as fh:
            if fh.read() == data:
                return bp
        bp = "%s.%d" % (bp, int(time.time()))
    atomic_write(bp, data)
    return bp


def _refuse(patch: Patch, info: Json, force: bool) -> None:
    """OpError("refused") when the patch names another package or version (no --force)."""
    if force:
        return
    if patch.package and patch.package != info["package"]:
        raise OpError("refused", "patch %s is for package %s, this host's package is %s "
                          "(use --force to apply anyway)" % (patch.id, patch.package,
                                                             info["package"]))
    if not patch.applies_to_version(info["version"]):
        raise OpError("refused", "patch %s is for versions %s; %s is %s (use --force to "
                          "try anyway)" % (patch.id, ", ".join(patch.versions), info["package"],
                                           info["version"]))


def _new_entry(req: Json, info: Json, patch: Patch, ledger: Ledger, plan: list[Json]) -> Json:
    """The ledger entry of an apply about to start ("applying"), every backup written."""
    entry = {"id": patch.id, "state": "applying", "description": patch.description,
             "package": info["package"], "package_dir": info["path"],
             "version": info["version"],
             "patch_sha256": _sha_bytes(req["patch_text"].encode()), "patch_text":
             req["patch_text"], "source": req.get("source", ""), "applied_at": _now(),
             "who": "%s (as %s on %s)" % (req.get("who", "?"), os.environ.get("USER", "?"),
                                          socket.gethostname()),
             "pid": os.getpid(), "files": []}
    for p in plan:
        entry["files"].append({"path": p["path"], "sha_before": _sha_bytes(p["before"]),
                               "sha_after": _sha_bytes(p["after"]), "mode": p["mode"],
                               "backup": _write_backup(ledger, patch.id, p["path"],
                                                       p["before"])})
    return entry


def op_apply(req: Json) -> Json:
    info = locate(req["package"])
    pkg_dir = info["path"]
    patch = parse_patch(req["patch_text"], source=req.get("source", "<patch>"),
                        default_id=req.get("default_id", ""))
    force, dry = bool(req.get("force")), bool(req.get("dry_run"))
    _refuse(patch, info, force)
    ledger = Ledger(pkg_dir, info["package"])
    data = ledger.load()
    entry = next((e for e in ledger.entries_for(data) if e["id"] == patch.id), None)
    if entry is None:
        _plan(patch, pkg_dir, force)  # bad input fails here, before anything is written
    if not dry:
        ledger.lock()  # then look again under the lock: another run may have got there first
        data = ledger.load()
        entry = next((e for e in ledger.entries_for(data) if e["id"] == patch.id), None)
    if entry is not None:
        return _continue_entry(req, info, ledger, data, entry, patch, dry)
    plan = _plan(patch, pkg_dir, force)
    todo = [p for p in plan if p["state"] == "original"]
    diff = "".join(unified_diff(p["path"], p["before"].decode("utf-8", "surrogateescape"),
                                p["after"].decode("utf-8", "surrogateescape")) for p in plan)
    files = [{"path": p["path"], "state_before": p["state"],
              "sha_before": _sha_bytes(p["before"]), "sha_after": _sha_bytes(p["after"])}
             for p in plan]
    if dry:
        return {"status": "dry-run", "id": patch.id, "files": files, "diff": diff,
                "install": info}
    entry = _new_entry(req, info, patch, ledger, plan)
    data["entries"].append(entry)
    ledger.save(data)
    done = _write_files(req, pkg_dir, [(p["path"], p["after"], p["mode"]) for p in todo],
                        ledger, data, entry, rollback=[(p["path"], p["before"], p["mode"])
                                                       for p in todo])
    entry["state"] = "applied"
    entry.pop("pid", None)
    ledger.save(data)
    status = "applied" if todo else "recorded"
    return {"status": status, "id": patch.id, "files": files, "changed": done,
            "diff": diff, "ledger": ledger.path, "install": info}


def _write_files(req: Json, pkg_dir: str, writes: list[Write], ledger: Ledger, data: Json,
                 entry: Json, rollback: list[Write]) -> list[str]:
    """Write each file atomically; on an error undo the ones written (all or nothing)."""
    pause = float(req.get("pause_between_files") or 0)
    _detach_from_caller()
    done = []
    try:
        for k, (rel, content, mode) in enumerate(writes):
            if k and pause:
                time.sleep(pause)  # test hook: a window to kill the caller between files
            heartbeat(rel)
            path = inside(pkg_dir, rel)  # through a link inside the install: the link stays
            atomic_write(path, content, mode)
            _remove_pycache(path)
            done.append(rel)
    except (OSError, OpError) as e:
        for rel, content, mode in rollback:
            if rel in done:
                atomic_write(inside(pkg_dir, rel), content, mode)
                _remove_pycache(inside(pkg_dir, rel))
        data["entries"] = [x for x in data["entries"] if x is not entry]
        ledger.save(data)
        raise OpError("io", "writing %s failed (%s); the files already written were "
                          "restored" % (writes[len(done)][0] if len(done) < len(writes)
                                        else "?", e)) from None
    return done


def _continue_entry(req: Json, info: Json, ledger: Ledger, data: Json, entry: Json,
                    patch: Patch, dry: bool) -> Json:
    """The patch is in the ledger: a no-op, or finishing an apply that was interrupted."""
    pkg_dir = info["path"]
    states = []
    for f in entry["files"]:
        cur, _ = _file_bytes(pkg_dir, f["path"])
        states.append((f, cur, _state_of(cur, f["sha_before"], f["sha_after"])))
    bad = [(f["path"], s) for f, _, s in states if s in ("drifted", "missing")]
    files = [{"path": f["path"], "state_before": s, "sha_before": f["sha_before"],
              "sha_after": f["sha_after"]} for f, _, s in states]
    if bad:
        raise OpError("drift", "patch %s is in the ledger but %s changed since (%s); see "
                          "`ddprobe patch status`, then `ddprobe patch revert %s --force`"
                          % (patch.id, ", ".join(p for p, _ in bad),
                             ", ".join(s for _, s in bad), patch.id))
    todo = [(f, cur) for f, cur, s in states if s == "original" and cur is not None]
    if not todo:
        if entry["state"] != "applied" and not dry:
            entry["state"] = "applied"
            ledger.save(data)
        return {"status": "noop", "id": patch.id, "files": files, "changed": [],
                "message": "already applied", "ledger": ledger.path, "install": info}
    writes = []
    diff = ""
    by_path = {fp.path: fp for fp in patch.files}
    for f, cur in todo:
        fp = by_path.get(f["path"])
        if fp is None:
            raise OpError("mismatch", "the ledger's patch %s names %s, this patch does not"
                              % (patch.id, f["path"]))
        text = cur.decode("utf-8", "surrogateescape")
        new = apply_file(text, fp).encode("utf-8", "surrogateescape")
        if _sha_bytes(new) != f["sha_after"]:
            raise OpError("mismatch", "%s: finishing patch %s would not give the recorded "
                              "result; revert it instead" % (f["path"], patch.id))
        writes.append((f["path"], new, f.get("mode")))
        diff += unified_diff(f["path"], text, new.decode("utf-8", "surrogateescape"))
    if dry:
        return {"status": "dry-run", "id": patch.id, "files": files, "diff": diff,
                "install": info}
    done = _write_files(req, pkg_dir, writes, ledger, data, entry, rollback=[
        (f["path"], cur, f.get("mode")) for f, cur in todo])
    entry["state"] = "applied"
    entry.pop("pid", None)
    ledger.save(data)
    return {"status": "finished", "id": patch.id, "files": files, "changed": done,
            "diff": diff, "ledger": ledger.path, "install": info}


# ----- revert -----------------------------------------------------------------------------------

def op_revert(req: Json) -> Json:
    info = locate(req["package"])
    pkg_dir = info["path"]
    ledger = Ledger(pkg_dir, info["package"])
    if os.path.isdir(ledger.dir):  # no ledger yet: nothing recorded, and nothing to create
        ledger.lock()
    data = ledger.load()
    entries = ledger.entries_for(data)
    force = bool(req.get("force"))
    if req.get("all"):
        targets = list(reversed(entries))  # newest first: stacked patches unwind in order
    else:
        targets = [e for e in entries if e["id"] == req["id"]]
        if not targets:
            if req.get("patch_text"):
                return _revert_unrecorded(req, info)
            known = ", ".join(e["id"] for e in entries) or "none"
            raise OpError("unknown", "patch %s is not applied on this host (applied: %s)"
                              % (req["id"], known))
    results = []
    for entry in targets:
        results.append(_revert_entry(req, pkg_dir, ledger, data, entry, force))
    return {"status": "reverted" if results else "noop", "reverted": results,
            "ledger": ledger.path, "install": info}


def _read_backup(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _unpatched(cur: bytes | None, entry: Json, rel: str) -> bytes | None:
    """The original rebuilt by reversing the entry's diff on the current text; None: cannot."""
    if cur is None or not entry.get("patch_text"):
        return None
    p = parse_patch(entry["patch_text"], default_id=entry["id"])
    fp = next((x for x in p.files if x.path == rel), None)
    if fp is None:
        return None
    try:
        return apply_file(cur.decode("utf-8", "surrogateescape"),
                          fp.reversed()).encode("utf-8", "surrogateescape")
    except PatchTextError:
        return None


def _original_of(f: Json, cur: bytes | None, entry: Json) -> bytes:
    """A file's original bytes: its backup, else (gone or damaged) the diff reversed."""
    original = _read_backup(f["backup"])
    if original is not None and _sha_bytes(original) == f["sha_before"]:
        return original
    original = _unpatched(cur, entry, f["path"])
    if original is None or _sha_bytes(original) != f["sha_before"]:
        raise OpError("backup", "%s: the backup %s is missing or does not match "
                          "the recorded sha256 %s" % (f["path"], f["backup"],
                                                      f["sha_before"][:12]))
    return original


def _restore(pkg_dir: str, ledger: Ledger, entry: Json, f: Json, cur: bytes | None,
             state: str, original: bytes, mode: int | None) -> None:
    """Write the original back (a drifted file kept beside the backups first), then check."""
    path = inside(pkg_dir, f["path"])
    if state == "drifted" and cur is not None:
        atomic_write("%s.drift-%d" % (ledger.backup_path(entry["id"], f["path"]),
                                      int(time.time())), cur)
    heartbeat(f["path"])
    atomic_write(path, original, mode)
    _remove_pycache(path)
    with open(path, "rb") as fh:
        if _sha_bytes(fh.read()) != f["sha_before"]:
            raise OpError("io", "%s: restored file does not hash to the original"
                              % f["path"])


def _to_history(req: Json, ledger: Ledger, data: Json, entry: Json) -> Json:
    """Move the entry from the ledger's entries to its history; drop its backups."""
    data["entries"] = [e for e in data["entries"] if e is not entry]
    entry = dict(entry)
    entry["state"] = "reverted"
    entry["reverted_at"] = _now()
    entry["reverted_by"] = req.get("who", "?")
    entry.pop("patch_text", None)
    data["history"].append(entry)
    ledger.save(data)
    for f in entry["files"]:
        try:
            os.unlink(f["backup"])
        except OSError:
            pass
    _prune_empty(os.path.join(ledger.dir, "backups", entry["id"]))
    return entry


def _revert_entry(req: Json, pkg_dir: str, ledger: Ledger, data: Json, entry: Json,
                  force: bool) -> Json:
    plan = []
    for f in entry["files"]:  # every file checked, and its original found, before any write
        cur, mode = _file_bytes(pkg_dir, f["path"])
        state = _state_of(cur, f["sha_before"], f["sha_after"])
        if state in ("drifted", "missing") and not force:
            raise OpError("drift", "%s changed since patch %s was applied (%s); refusing to "
                              "overwrite it (use --force to restore the original anyway)"
                              % (f["path"], entry["id"], state), path=f["path"])
        original = _original_of(f, cur, entry)
        plan.append((f, cur, state, original, mode if mode is not None else f.get("mode")))
    restored = []
    for f, cur, state, original, mode in plan:
        if state != "original":
            _restore(pkg_dir, ledger, entry, f, cur, state, original, mode)
            restored.append(f["path"])
    entry = _to_history(req, ledger, data, entry)
    return {"id": entry["id"], "restored": restored,
            "files": [{"path": f["path"], "sha256": f["sha_before"]} for f in entry["files"]]}


def _prune_empty(d: str) -> None:
    for root, _dirs, _files in os.walk(d, topdown=False):
        if not os.listdir(root):
            try:
                os.rmdir(root)
            except OSError:
                pass


def _revert_unrecorded(req: Json, info: Json) -> Json:
    """A patch applied by hand (not in the ledger): reverse its diff where it is applied."""
    pkg_dir = info["path"]
    patch = parse_patch(req["patch_text"], source=req.get("source", "<patch>"),
                        default_id=req.get("id", ""))
    writes = []
    for fp in patch.files:
        data, mode = _file_bytes(pkg_dir, fp.path)
        if data is None:
            raise OpError("missing", "%s: file not found in this version" % fp.path)
        text = data.decode("utf-8", "surrogateescape")
        try:
            orig = apply_file(text, fp.reversed())
        except PatchTextError:
            continue  # not applied in this file
        writes.append((fp.path, orig.encode("utf-8", "surrogateescape"), mode))
    if not writes:
        return {"status": "noop", "reverted": [], "message": "patch %s is not applied"
                % patch.id, "install": info}
    for rel, content, mode in writes:
        heartbeat(rel)
        atomic_write(inside(pkg_dir, rel), content, mode)
        _remove_pycache(inside(pkg_dir, rel))
    return {"status": "reverted", "reverted": [{"id": patch.id, "restored": [w[0] for w in
                                                                              writes]}],
            "message": "not in the ledger: reversed the diff", "install": info}


# ----- status / diff ----------------------------------------------------------------------------
