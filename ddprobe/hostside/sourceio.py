"""Host side, part 1: output to the caller, install lookup, reading sources, grep, writes.

Standard library only, Python 3.8+: `hostside.client` concatenates patchtext and these modules
into the one program it sends (on stdin, see `hostside.client`); `common` is the protocol.
"""
from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
import re
import sys
from typing import Any, Dict, List, Optional, Tuple

Json = Dict[str, Any]
Write = Tuple[str, bytes, Optional[int]]  # (package-relative path, content, mode)
LEDGER_VERSION = 1


if "OpError" not in globals():  # standalone (tests); on a host common.py's text comes first
    from ddprobe.hostside.common import _CALLER_GONE, OpError, emit


# ----- output -----------------------------------------------------------------------------------

def heartbeat(what: str) -> None:
    """Tell the caller where we are. If the caller is gone (ddprobe killed, ssh dropped) keep
    going: finishing the apply is the all-or-nothing outcome; only a kill of this process
    itself can stop it between files, and the ledger then says which files are patched."""
    if _CALLER_GONE:
        return
    try:
        emit({"progress": what})
    except (BrokenPipeError, OSError):
        _CALLER_GONE.append(True)


def _detach_from_caller() -> None:
    """A hang-up or ^C of the caller must not cut a multi-file write in half."""
    import signal
    for sig in (signal.SIGHUP, signal.SIGINT):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (OSError, ValueError):
            pass


# ----- install lookup ---------------------------------------------------------------------------

def locate(pkg: str) -> Json:
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", pkg):
        raise OpError("usage", "invalid package name %r" % pkg)
    spec = importlib.util.find_spec(pkg)  # a top-level name: found, not imported
    if spec is None:
        raise OpError("not-installed", "package %r is not importable by %s (sys.path: %s)"
                          % (pkg, sys.executable, ", ".join(sys.path[:6])))
    locs = list(spec.submodule_search_locations or [])
    if locs:
        pkg_dir = os.path.realpath(locs[0])
    elif spec.origin:
        pkg_dir = os.path.dirname(os.path.realpath(spec.origin))
    else:
        raise OpError("not-installed", "package %r has no location" % pkg)
    version = _dist_version(os.path.dirname(pkg_dir), pkg)
    if version is None:
        try:
            import importlib.metadata as md  # slow (scans every distribution): the fallback
            version = md.version(pkg)
        except Exception:
            version = None
    if version is None:  # read it from the source
        for name in ("version.py", "_version.py", "__init__.py"):
            try:
                with open(os.path.join(pkg_dir, name), encoding="utf-8") as fh:
                    m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", fh.read(), re.M)
                if m:
                    version = m.group(1)
                    break
            except OSError:
                pass
    return {"package": pkg, "version": version, "path": pkg_dir,
            "site_packages": os.path.dirname(pkg_dir), "python": sys.executable,
            "python_version": "%d.%d.%d" % sys.version_info[:3]}


# ----- reading sources --------------------------------------------------------------------------

def _dist_version(site: str, pkg: str) -> str | None:
    """Version from `<site>/<pkg>-<version>.dist-info/METADATA` beside the package, if one
    distribution of that name is there."""
    found = []
    norm = pkg.replace("-", "_").lower()
    for d in glob.glob(os.path.join(site, "*.dist-info")):
        base = os.path.basename(d)[:-len(".dist-info")]
        name, _, ver = base.partition("-")
        if name.replace("-", "_").lower() == norm and ver:
            try:
                with open(os.path.join(d, "METADATA"), encoding="utf-8") as fh:
                    head = fh.read(4096)
            except OSError:
                continue
            m = re.search(r"^Version:\s*(\S+)", head, re.M)
            if m:
                found.append(m.group(1))
    return found[0] if len(set(found)) == 1 else None


def _read_text(path: str) -> str:
    with open(path, "rb") as fh:
        return fh.read().decode("utf-8", "surrogateescape")


def _imports(text: str, pkg: str) -> list[tuple[str, list[str]]]:
    """(module path relative to the package, imported names) for `from pkg.x import a, b`."""
    out = []
    for m in re.finditer(r"^[ \t]*from[ \t]+%s\.([\w.]+)[ \t]+import[ \t]+" % re.escape(pkg),
                         text, re.M):
        rest = text[m.end():]
        if rest.startswith("("):
            body = rest[1:rest.find(")")] if ")" in rest else ""
        else:
            body = rest.split("\n", 1)[0]
        names = [n.strip().split(" as ")[-1].strip() for n in body.replace("\n", " ").split(",")]
        out.append((m.group(1), [n for n in names if re.match(r"^\w+$", n)]))
    return out


_PRODUCER = re.compile(r"self\.\w+[ \t]*(?::[^=\n]*)?=[ \t]*([A-Za-z_]\w*)[ \t]*[.(]")


def _module_file(pkg_dir: str, dotted: str) -> str | None:
    base = os.path.join(pkg_dir, *dotted.split("."))
    for cand in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(cand):
            return cand
    return None


# a helper module is followed only if its text allocates something a buffer can come from
_ALLOCATES = ("zeros(", "empty(", "ones(", "full(", "arange(", "_like(")


def _follows(follow: Any, dotted: str, names: Any, producers: Any, prefixes: Any) -> bool:
    """Whether an import of `dotted` (binding `names`) is followed, by the `follow` rule."""
    if follow == "helpers":
        return bool(producers.intersection(names))
    if follow == "prefixes":
        return any(dotted == p or dotted.startswith(p + ".") for p in prefixes)
    return False


def _follow_once(files: Dict[str, str], frontier: List[str], info: Json, req: Json,
                 total: int) -> Tuple[List[str], int]:
    """Read the modules the frontier's files import (by the rule); the new frontier, total."""
    follow = req.get("follow")
    prefixes = req.get("follow_prefixes") or []
    max_bytes = int(req.get("max_bytes", 32 * 1024 * 1024))
    pkg_dir = info["path"]
    nxt = []
    for rel in frontier:
        text = files[rel]
        # names called to produce an attribute: `self.x = name(`, `self.x: T = name.create(`
        producers = set(_PRODUCER.findall(text)) if follow == "helpers" else set()
        for dotted, names in _imports(text, info["package"]):
            if not _follows(follow, dotted, names, producers, prefixes):
                continue
            path = _module_file(pkg_dir, dotted)
            if path is None:
                continue
            r2 = os.path.relpath(path, pkg_dir)
            if r2 in files or total >= max_bytes:
                continue
            text2 = _read_text(path)
            if follow == "helpers" and not any(t in text2 for t in _ALLOCATES):
                continue  # allocates nothing: no buffer can come from it
            files[r2] = text2
            total += len(text2)
            nxt.append(r2)
    return nxt, total


def op_read(req: Json) -> Json:
    info = locate(req["package"])
    pkg_dir = info["path"]
    files: Dict[str, str] = {}
    unmatched = []
    total = 0
    for pat in req.get("patterns", []):
        hits = sorted(glob.glob(os.path.join(pkg_dir, pat)))
        if not hits:
            unmatched.append(pat)
        for h in hits:
            rel = os.path.relpath(h, pkg_dir)
            if rel not in files and os.path.isfile(h):
                files[rel] = _read_text(h)
                total += len(files[rel])
    frontier = list(files)
    for _ in range(int(req.get("follow_depth", 1))):
        frontier, total = _follow_once(files, frontier, info, req, total)
    return {"install": info, "files": files, "unmatched": unmatched}


# ----- ledger -----------------------------------------------------------------------------------

def _sha_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(d: str) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def inside(root: str, rel: str, what: str = "path") -> str:
    """`root/rel` as the real path ddprobe may read or write, or OpError("path").

    `rel` comes from a patch or a (hand-editable) ledger: no absolute path, no `..`, no NUL;
    and the real path (every symlink resolved, on this host) must stay inside the real root.
    A symlink whose target is inside the root resolves to that target: writes go through it
    and the link itself is kept."""
    if not isinstance(rel, str) or not rel or "\0" in rel or os.path.isabs(rel) or \
            ".." in rel.replace("\\", "/").split("/"):
        raise OpError("path", "%s %r is not a relative path inside %s" % (what, rel, root))
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(root, rel))
    if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
        raise OpError("path", "%s %r resolves to %s, outside %s (a symlink or `..` leaving "
                          "it): refused, nothing written" % (what, rel, real, real_root))
    return real


def atomic_write(path: str, data: bytes, mode: int | None = None) -> None:
    """Temp file beside the target, fsync, keep the mode, rename, fsync the directory."""
    d = os.path.dirname(path) or "."
    tmp = os.path.join(d, ".%s.ddprobe-%d.tmp" % (os.path.basename(path), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(d)


def _grep_target(req: Json, info: Json) -> str:
    """The file or directory to search: `subdir` of the package, never outside it."""
    sub = (req.get("subdir") or "").strip("/")
    target = os.path.realpath(os.path.join(info["path"], sub))
    if target != info["path"] and not target.startswith(info["path"] + os.sep):
        raise OpError("usage", "--path %r leaves the package directory" % sub)
    if not os.path.exists(target):
        raise OpError("usage", "--path %r: no such file or directory in %s %s"
                          % (sub, info["package"], info["version"]))
    return target


def _rg_argv(rg: str, req: Json, ctx: str, per_file: str) -> Tuple[List[str], str]:
    argv = [rg, "--json", "--no-config", "--no-ignore", "--hidden", "-C", ctx, "-m", per_file]
    if req.get("fixed"):
        argv.append("-F")
        return argv, "fixed"
    return argv, "rust-regex"


def _grep_argv(req: Json, ctx: str, per_file: str) -> Tuple[List[str], str]:
    import shutil
    grep = shutil.which("grep")
    if not grep:
        raise OpError("usage", "neither ripgrep (rg) nor grep is on the host's PATH")
    # one matcher only: -F, or -P (PCRE: \d, \s, lazy quantifiers, like rg's syntax)
    # where this grep has it, else -E (POSIX ERE). `-rnIZE ... -F` is refused by grep
    # ("conflicting matchers specified"): that was issue 15.
    if req.get("fixed"):
        matcher, dialect = "-F", "fixed"
    elif _grep_has_pcre(grep):
        matcher, dialect = "-P", "pcre"
    else:
        matcher, dialect = "-E", "ere"
    return [grep, "-rnIZ", matcher, "-C", ctx, "-m", per_file], dialect


def op_grep(req: Json) -> Json:
    """ripgrep when the host has it (structured --json), else grep -rnZ; argv only, no shell.

    req["tool"]: auto (rg if on PATH), rg (required) or grep (forced)."""
    import shutil
    import subprocess
    info = locate(req["package"])
    target = _grep_target(req, info)
    ctx = str(int(req.get("context") or 0))
    per_file = str(int(req.get("max_per_file", 1000)))
    want = req.get("tool") or ("grep" if req.get("no_rg") else "auto")
    rg = shutil.which("rg") if want in ("auto", "rg") else None
    if want == "rg" and not rg:
        raise OpError("usage", "ripgrep (rg) is not on the host's PATH")
    tool = "rg" if rg else "grep"
    argv, dialect = _rg_argv(rg, req, ctx, per_file) if rg else _grep_argv(req, ctx, per_file)
    if req.get("ignore_case"):
        argv.append("-i")
    for inc in req.get("include") or []:
        argv += (["-g", inc] if tool == "rg" else ["--include=" + inc])
    argv += ["-e", req["pattern"], "--", target]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL)
    if p.returncode not in (0, 1):
        raise OpError("usage", "%s failed (exit %d): %s" % (
            tool, p.returncode, p.stderr.decode("utf-8", "replace").strip()[-400:]))
    out = p.stdout.decode("utf-8", "surrogateescape")
    limit = int(req.get("max_bytes", 8 * 1024 * 1024))
    return {"install": info, "tool": tool, "dialect": dialect, "root": info["path"],
            "output": out[:limit], "truncated": len(out) > limit}


def _grep_has_pcre(grep):
    """GNU grep built with PCRE exits 1 (no match) here; without it, or busybox, exits 2."""
    import subprocess
    try:
        p = subprocess.run([grep, "-P", "-e", "x", "--", os.devnull], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    except OSError:
        return False
    return p.returncode == 1
