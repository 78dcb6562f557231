"""Install the testbed onto a host the way SGLang is installed: a package dir of its own.

`install_testbed(PREFIX)` writes `PREFIX/ddtestbed/` (this package, minus this installer), the
coding suite as `PREFIX/ddtestbed/data/coding.json`, and `PREFIX/ddtestbed-<ver>.dist-info/`
(METADATA, RECORD) so that with PREFIX on PYTHONPATH `importlib.metadata.version("ddtestbed")`
works and the server runs as `python -m ddtestbed.launch_server`.

Re-installing is idempotent and never clobbers local edits: RECORD holds each file's hash as
installed, and a file whose current hash differs from it (e.g. a ddprobe patch was applied) is
kept unless `force=True`. Files are replaced atomically (write to a temp file, then rename).
"""
from __future__ import annotations

import base64
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .version import __version__

PACKAGE = "ddtestbed"
_SRC = Path(__file__).resolve().parent
_SUITE = _SRC.parent / "ddprobe" / "probes" / "suites" / "coding.json"
_SKIP_NAMES = {"install.py", "__pycache__"}


class InstallError(RuntimeError):
    """The testbed could not be installed (the message says where and why)."""


@dataclass(frozen=True)
class InstallResult:
    prefix: Path
    package_dir: Path
    version: str
    written: tuple[str, ...]  # paths (relative to prefix) created or replaced
    removed: tuple[str, ...]  # installed files no longer shipped
    kept_modified: tuple[str, ...]  # locally modified files left alone (no force)
    suite: Path | None  # the coding suite copied, if one was found

    @property
    def changed(self) -> bool:
        return bool(self.written or self.removed)


def default_prefix() -> Path:
    """`$XDG_DATA_HOME/ddprobe/testbed`, else `~/.local/share/ddprobe/testbed`."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "ddprobe" / "testbed"


def install_testbed(prefix: Path, *, force: bool = False, suite: Path | None = None) -> Path:
    """Install (or update) the testbed under `prefix`; returns the package dir."""
    return sync_testbed(prefix, force=force, suite=suite).package_dir


def sync_testbed(prefix: Path, *, force: bool = False, suite: Path | None = None) -> InstallResult:
    """Install or update, reporting what changed. See the module docstring for the rules."""
    prefix = Path(prefix).expanduser().resolve()
    suite = suite if suite is not None else (_SUITE if _SUITE.is_file() else None)
    if suite is not None and not suite.is_file():
        raise InstallError(f"coding suite not found: {suite}")
    wanted = _source_files(suite)
    dist_info = prefix / f"{PACKAGE}-{__version__}.dist-info"
    try:
        prefix.mkdir(parents=True, exist_ok=True)
        recorded = _read_all_records(prefix)
        written, kept = [], []
        for rel, data in sorted(wanted.items()):
            dest = prefix / rel
            current = dest.read_bytes() if dest.is_file() else None
            if current == data:
                continue
            modified = current is not None and recorded.get(rel) not in (None, _digest(current))
            if modified and not force:
                kept.append(rel)
                continue
            _atomic_write(dest, data)
            written.append(rel)
        removed = []
        for rel, digest in recorded.items():
            path = prefix / rel
            if rel in wanted or rel.startswith(f"{PACKAGE}-") or not path.is_file():
                continue
            if force or _digest(path.read_bytes()) == digest:
                path.unlink()
                removed.append(rel)
        record_changed = _write_dist_info(prefix, dist_info, wanted, kept)
    except OSError as e:
        raise InstallError(f"cannot install the testbed into {prefix}: {e}") from None
    if record_changed and not written and not removed:
        written.append(str(dist_info.relative_to(prefix) / "RECORD"))
    return InstallResult(prefix=prefix, package_dir=prefix / PACKAGE, version=__version__,
                         written=tuple(written), removed=tuple(sorted(removed)),
                         kept_modified=tuple(kept), suite=suite)


def _source_files(suite: Path | None) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for path in sorted(_SRC.rglob("*")):
        rel_parts = path.relative_to(_SRC).parts
        if any(p in _SKIP_NAMES for p in rel_parts) or not path.is_file() \
                or path.suffix in (".pyc", ".pyo") or rel_parts[0] == "data":
            continue
        files["/".join((PACKAGE,) + rel_parts)] = path.read_bytes()
    if suite is not None:
        files[f"{PACKAGE}/data/coding.json"] = suite.read_bytes()
    return files


def _digest(data: bytes) -> str:
    raw = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _read_all_records(prefix: Path) -> dict[str, str]:
    """path -> digest as installed, from every ddtestbed dist-info under prefix."""
    out: dict[str, str] = {}
    for record in sorted(prefix.glob(f"{PACKAGE}-*.dist-info/RECORD")):
        for line in record.read_text(encoding="utf-8").splitlines():
            parts = line.rsplit(",", 2)
            if len(parts) == 3 and parts[1]:
                out[parts[0]] = parts[1]
    return out


def _write_dist_info(prefix: Path, dist_info: Path, files: dict[str, bytes],
                     kept: list[str]) -> bool:
    for old in prefix.glob(f"{PACKAGE}-*.dist-info"):
        if old != dist_info:
            shutil.rmtree(old)
    previous = _read_all_records(prefix)
    metadata = (f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {__version__}\n"
                "Summary: ddprobe's SGLang stand-in: a speculative-decoding test server\n")
    meta_files = {"METADATA": metadata.encode(), "INSTALLER": b"ddprobe\n"}
    lines = []
    for rel, data in sorted(files.items()):
        # a kept (locally modified) file keeps its original digest, so it stays "modified"
        digest = previous.get(rel, _digest(data)) if rel in kept else _digest(data)
        lines.append(f"{rel},{digest},{len(data)}")
    info_rel = dist_info.relative_to(prefix).as_posix()
    for name, data in meta_files.items():
        lines.append(f"{info_rel}/{name},{_digest(data)},{len(data)}")
    lines.append(f"{info_rel}/RECORD,,")
    record = ("\n".join(lines) + "\n").encode()
    changed = False
    for name, data in {**meta_files, "RECORD": record}.items():
        path = dist_info / name
        if not path.is_file() or path.read_bytes() != data:
            _atomic_write(path, data)
            changed = True
    return changed


def _atomic_write(dest: Path, data: bytes) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; installed sources are world-readable
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
