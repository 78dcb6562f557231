"""Patches on a host: apply / revert / status / diff, with a ledger and backups on the host.

The work happens on the host in one helper run per command (see `hostside.sourceops`): atomic
per file, all or nothing across files, idempotent, refusing edited files unless forced,
recording every change in `<dir holding the package>/.ddprobe/ledger.json`.
"""
from __future__ import annotations

import difflib
import getpass
import os
import shlex
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddprobe.bundled_files import patch_dirs
from ddprobe.errors import PatchError, PatchNotFound, RemoteCommandError
from ddprobe.hostside.client import Install, call
from ddprobe.hostside.patchtext import Patch, PatchTextError, parse_patch
from ddprobe.inventory import Host
from ddprobe.remote import Remote

# Test hook (documented in docs/sources.md): seconds the host helper sleeps between files of an
# apply, giving a test a window to kill ddprobe mid-apply.
PAUSE_ENV = "DDPROBE_TEST_APPLY_PAUSE"


def load_patch(spec: str) -> Patch:
    """A patch from a file path, or by name: ./playbooks/patches/, then the ones shipped in
    the package (`ddtestbed-custom-mask`, `sglang-0.5.10-...`)."""
    p = Path(spec).expanduser()
    cands = [p] if p.suffix or "/" in spec else []
    cands += [d / f"{spec}.patch" for d in patch_dirs()] + [d / spec for d in patch_dirs()]
    for c in cands:
        if c.is_file():
            try:
                text = c.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise PatchError(f"{c}: cannot read: {e}") from None
            return parse_patch(text, source=str(c), default_id=c.stem)
    dirs = [d for d in patch_dirs() if d.is_dir()]  # only the directories that exist
    known = sorted({x.stem for d in dirs for x in d.glob("*.patch")})
    close = difflib.get_close_matches(spec, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    # what the user typed, not a patch that failed: a usage error (exit 3), not PatchError's 13
    raise PatchNotFound(f"patch {spec!r} not found ({hint}a file, or one of: "
                      f"{', '.join(known) or 'none'} in {', '.join(map(str, dirs)) or '-'})")


def list_patches() -> list[Patch]:
    out: list[Patch] = []
    seen: set[str] = set()
    for d in patch_dirs():
        for f in sorted(d.glob("*.patch")) if d.is_dir() else []:
            if f.stem in seen:
                continue
            seen.add(f.stem)
            try:
                out.append(parse_patch(f.read_text(encoding="utf-8"), source=str(f),
                                       default_id=f.stem))
            except PatchTextError:
                continue
    return out


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class FileChange:
    path: str
    state_before: str  # original | patched | drifted | missing
    sha_before: str
    sha_after: str


@dataclass(frozen=True)
class ApplyResult:
    host: str
    patch_id: str
    status: str  # applied | recorded | finished | noop | dry-run
    files: tuple[FileChange, ...]
    changed: tuple[str, ...] = ()
    diff: str = ""
    message: str = ""
    ledger: str = ""
    install: Install | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "patch": self.patch_id, "status": self.status,
                "files": [f.__dict__ for f in self.files], "changed": list(self.changed),
                "diff": self.diff, "message": self.message, "ledger": self.ledger,
                "install": self.install.to_dict() if self.install else None}


def _patch_helper(r: Remote, op: str, req: dict[str, Any], h: Host) -> dict[str, Any]:
    """The host's patch helper; one that died mid-way (killed, OOM, a reboot) is a patch error
    that says where to look: each file is whole, `patch status` says which state."""
    try:
        return call(r, op, req, program="sources", timeout=300)
    except RemoteCommandError as e:
        raise PatchError(f"{h.name}: the patch helper died during {op} (exit {e.code}); each "
                         f"file is original or patched, never half: run `ddprobe patch status "
                         f"--host {h.name}` to see which, and finish or roll back") from None


def apply_patch(r: Remote, patch: Patch, *, host: Host | None = None, dry_run: bool = False,
                force: bool = False) -> ApplyResult:
    h = host if host is not None else r.host
    req = {"package": h.package, "patch_text": patch.text, "source": patch.source,
           "default_id": patch.id, "dry_run": dry_run, "force": force, "who": _who(),
           "pause_between_files": float(os.environ.get(PAUSE_ENV) or 0)}
    res = _patch_helper(r, "apply", req, h)
    return ApplyResult(
        host=h.name, patch_id=res["id"], status=res["status"],
        files=tuple(FileChange(f["path"], f["state_before"], f["sha_before"], f["sha_after"])
                    for f in res.get("files", [])),
        changed=tuple(res.get("changed") or ()), diff=res.get("diff", ""),
        message=res.get("message", ""), ledger=res.get("ledger", ""),
        install=Install.from_dict(res["install"]) if res.get("install") else None)


@dataclass(frozen=True)
class RevertResult:
    host: str
    status: str  # reverted | noop
    reverted: tuple[tuple[str, tuple[str, ...]], ...]  # (patch id, files restored)
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "status": self.status, "message": self.message,
                "reverted": [{"id": i, "restored": list(f)} for i, f in self.reverted]}


def revert_patch(r: Remote, patch: Patch | str | None = None, *, host: Host | None = None,
                 all_patches: bool = False, force: bool = False) -> RevertResult:
    """Restore the originals byte for byte (checked by sha256) and drop the ledger entry.
    `patch` may be an id (as in the ledger) or a Patch (a patch applied by hand is reversed)."""
    h = host if host is not None else r.host
    if patch is None and not all_patches:
        raise PatchError("name a patch to revert, or use --all")
    req: dict[str, Any] = {"package": h.package, "all": all_patches, "force": force,
                           "who": _who()}
    if isinstance(patch, Patch):
        req.update(id=patch.id, patch_text=patch.text, source=patch.source)
    elif patch is not None:
        req["id"] = patch
    res = _patch_helper(r, "revert", req, h)
    return RevertResult(h.name, res["status"], tuple(
        (x["id"], tuple(x.get("restored") or ())) for x in res.get("reverted", [])),
        res.get("message", ""))


@dataclass(frozen=True)
class FileStatus:
    path: str
    state: str  # patched | original | drifted | missing
    sha_before: str
    sha_after: str
    backup: str
    backup_ok: bool


@dataclass(frozen=True)
class PatchEntry:
    id: str
    state: str  # applied | applying
    description: str
    applied_at: str
    who: str
    version: str | None
    files: tuple[FileStatus, ...]
    in_progress: bool = False  # an apply is running right now (its process is alive)
    source: str = ""  # where the patch text came from when it was applied (a file path)
    host: str = ""

    @property
    def _apply_arg(self) -> str:
        """What `patch apply` needs to finish it: the file it came from, unless the id finds
        it (a shipped patch), so the advice works for a patch from a file (issue 15)."""
        try:
            load_patch(self.id)
            return self.id
        except PatchError:
            return shlex.quote(self.source) if self.source and self.source != "<patch>" \
                else self.id

    @property
    def _on(self) -> str:
        return f" --host {self.host}" if self.host else ""

    @property
    def verdict(self) -> str:
        """applied | incomplete | drifted | interrupted-complete | in-progress"""
        states = {f.state for f in self.files}
        if self.in_progress:
            return "in-progress"
        if states & {"drifted", "missing"}:
            return "drifted"
        if self.state == "applying":
            return "incomplete" if "original" in states else "interrupted-complete"
        return "applied" if states == {"patched"} else "drifted"

    @property
    def advice(self) -> str:
        v = self.verdict
        if v == "incomplete":
            n = sum(f.state == "patched" for f in self.files)
            return (f"apply was interrupted ({n} of {len(self.files)} files patched, the rest "
                    f"original): `ddprobe patch apply {self._apply_arg}{self._on}` to finish, "
                    f"or `ddprobe patch revert {self.id}{self._on}` to roll back")
        if v == "interrupted-complete":
            return (f"all files patched but the apply was interrupted before it was recorded: "
                    f"`ddprobe patch apply {self._apply_arg}{self._on}` records it")
        if v == "drifted":
            bad = ", ".join(f"{f.path} ({f.state})" for f in self.files
                            if f.state not in ("patched",))
            return (f"changed since the patch was applied: {bad}; "
                    f"`ddprobe patch revert {self.id}{self._on} --force` restores the "
                    f"originals")
        return ""


@dataclass(frozen=True)
class PatchStatus:
    host: str
    install: Install
    ledger: str
    entries: tuple[PatchEntry, ...]
    history: tuple[dict[str, Any], ...] = field(default=(), repr=False)
    # a damaged or unreadable ledger: why, and every backup found (what `recover` can do)
    ledger_error: str | None = None
    backups: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "install": self.install.to_dict(), "ledger": self.ledger,
                "patches": [{**{k: v for k, v in e.__dict__.items() if k != "files"},
                             "verdict": e.verdict, "advice": e.advice,
                             "files": [f.__dict__ for f in e.files]} for e in self.entries],
                "history": list(self.history), "ledger_error": self.ledger_error,
                "backups": list(self.backups)}


def patch_status(r: Remote, *, host: Host | None = None) -> PatchStatus:
    h = host if host is not None else r.host
    res = call(r, "status", {"package": h.package}, program="sources", timeout=60)
    entries = tuple(PatchEntry(
        id=e["id"], state=e.get("state") or "", description=e.get("description") or "",
        applied_at=e.get("applied_at") or "", who=e.get("who") or "", version=e.get("version"),
        files=tuple(FileStatus(f["path"], f["state"], f["sha_before"], f["sha_after"],
                               f["backup"], bool(f["backup_ok"])) for f in e["files"]),
        in_progress=bool(e.get("in_progress")), source=str(e.get("source") or ""),
        host=h.name) for e in res["entries"])
    return PatchStatus(h.name, Install.from_dict(res["install"]), res["ledger"], entries,
                       tuple(res.get("history") or ()), ledger_error=res.get("ledger_error"),
                       backups=tuple(res.get("backups") or ()))


def recover_patches(r: Remote, *, host: Host | None = None, apply: bool = False
                    ) -> dict[str, Any]:
    """The way out of a damaged ledger: restore each backed-up file to its oldest backup and
    start a new ledger (the damaged one is kept beside it). A dry run unless `apply`."""
    h = host if host is not None else r.host
    return call(r, "recover", {"package": h.package, "apply": apply, "who": _who()},
                program="sources", timeout=300)


def patch_diff(r: Remote, patch_id: str | None = None, *, host: Host | None = None
               ) -> list[tuple[str, str]]:
    """(patch id, unified diff of the original backup -> the file now) per applied patch."""
    h = host if host is not None else r.host
    res = call(r, "diff", {"package": h.package, "id": patch_id}, program="sources", timeout=60)
    return [(p["id"], p["diff"]) for p in res["patches"]]


def applied_ids(status: PatchStatus) -> Sequence[str]:
    return [e.id for e in status.entries]


def revert_temporary(r: Remote, host: Host, *, keep: Sequence[str] = ()
                     ) -> tuple[list[str], list[str]]:
    """Revert ddprobe's own temporary patches (oversize experiments) that an interrupted run
    left applied, except `keep` (the ones the caller applied for this cell). Returns (notes,
    the patch ids still applied): a cell records what its install really carries (issue 15:
    a killed bisect's oversize patch was measured as `patches: []`)."""
    from ddprobe.sources.oversize import OVERSIZE_PREFIX
    ids = list(applied_ids(patch_status(r, host=host)))
    notes: list[str] = []
    for pid in [i for i in ids if i.startswith(OVERSIZE_PREFIX) and i not in keep]:
        revert_patch(r, pid, host=host)
        ids.remove(pid)
        notes.append(f"{host.name}: reverted leftover temporary patch {pid} (an interrupted "
                     f"run left it applied)")
    return notes, ids
