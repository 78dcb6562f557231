"""Unified diffs as data: parse, apply in memory with exact context, reverse, format, make.

Standard library only and Python 3.8 compatible at runtime: the host helper program embeds this
module's source (see `ddprobe.hostside.client`), so a multi-file apply runs on the host in one
round-trip with the same engine the tests exercise locally.

A patch file is a small header of `# key: value` lines (id, description, package, versions,
and optionally `sha256: <path> <hex>` for the original of each file), then a unified diff whose
paths are relative to the package directory (`a/srt/...`, `b/srt/...`).
"""
from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

try:  # inside ddprobe: a PatchError (exit code 13); on a host, inside the helper: stdlib only
    from ddprobe.errors import PatchError as _Base
except ImportError:  # pragma: no cover - exercised on hosts
    _Base = Exception  # type: ignore[assignment,misc]


class PatchTextError(_Base):
    """A malformed patch or one that does not apply; names the file, hunk and line."""

    def __init__(self, message: str, *, source: str = "", line: Optional[int] = None,
                 path: str = "", hunk: Optional[int] = None) -> None:
        self.source, self.line, self.path, self.hunk = source, line, path, hunk
        where = ""
        if source:
            where = f"{source}:{line}: " if line else f"{source}: "
        super().__init__(where + message)

    def to_error(self) -> Dict[str, object]:
        """The host program's error answer for it (`hostside.common.main`)."""
        return {"kind": "patch", "message": str(self), "path": self.path, "hunk": self.hunk}


# line numbers and counts of at most 12 digits (a longer one is a malformed header, never an
# int() of thousands of digits, which Python refuses with a ValueError)
_HUNK_RE = re.compile(r"^@@ -(\d{1,12})(?:,(\d{1,12}))? \+(\d{1,12})(?:,(\d{1,12}))? @@(.*)$")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


@dataclass(frozen=True)
class HunkLine:
    tag: str  # " ", "-", "+"
    text: str  # without the line's "\n" (a "\r" of a CRLF file stays)
    no_newline: bool = False  # followed by "\ No newline at end of file"


@dataclass(frozen=True)
class Hunk:
    number: int  # 1-based within its file
    header: str  # the "@@ ... @@ ..." line as written
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: Tuple[HunkLine, ...]
    source_line: int = 0  # line of the header in the patch file

    def old(self) -> List[HunkLine]:
        return [x for x in self.lines if x.tag in " -"]

    def new(self) -> List[HunkLine]:
        return [x for x in self.lines if x.tag in " +"]

    def reversed(self) -> "Hunk":
        flip = {"-": "+", "+": "-", " ": " "}
        lines = tuple(HunkLine(flip[x.tag], x.text, x.no_newline) for x in self.lines)
        header = "@@ -{} +{} @@{}".format(_range(self.new_start, self.new_len),
                                          _range(self.old_start, self.old_len),
                                          self.header.split("@@", 2)[2] if self.header.count(
                                              "@@") >= 2 else "")
        return Hunk(self.number, header, self.new_start, self.new_len, self.old_start,
                    self.old_len, lines, self.source_line)


@dataclass(frozen=True)
class FilePatch:
    path: str  # package-relative
    hunks: Tuple[Hunk, ...]

    def reversed(self) -> "FilePatch":
        return FilePatch(self.path, tuple(h.reversed() for h in self.hunks))


@dataclass(frozen=True)
class Patch:
    id: str
    files: Tuple[FilePatch, ...]
    description: str = ""
    package: Optional[str] = None
    versions: Tuple[str, ...] = ()
    original_sha256: Tuple[Tuple[str, str], ...] = ()  # (path, sha256 of the original)
    header: Tuple[Tuple[str, str], ...] = ()
    source: str = ""
    text: str = field(default="", repr=False)

    @property
    def paths(self) -> Tuple[str, ...]:
        return tuple(f.path for f in self.files)

    def expected_sha(self, path: str) -> Optional[str]:
        for p, h in self.original_sha256:
            if p == path:
                return h
        return None

    def reversed(self) -> "Patch":
        return Patch(self.id, tuple(f.reversed() for f in self.files), self.description,
                     self.package, self.versions, (), self.header, self.source, "")

    def applies_to_version(self, version: Optional[str]) -> bool:
        """True when no versions are declared, or `version` matches one (fnmatch-style '*')."""
        if not self.versions:
            return True
        if version is None:
            return False
        import fnmatch
        return any(fnmatch.fnmatchcase(version, v) for v in self.versions)


def _range(start: int, length: int) -> str:
    return str(start) if length == 1 else f"{start},{length}"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _clean_path(raw: str, source: str, line: int) -> Optional[str]:
    p = raw.split("\t", 1)[0].strip()
    if p == "/dev/null":
        return None
    if p.startswith(("a/", "b/")):
        p = p[2:]
    parts = p.split("/")
    if not p or p.startswith("/") or any(x in ("", ".", "..") for x in parts):
        raise PatchTextError(f"unsafe or empty path {raw.strip()!r} (paths must be relative to "
                             "the package, e.g. a/srt/layers/attention/triton_backend.py)",
                             source=source, line=line)
    return p


def parse_patch(text: str, source: str = "<patch>", default_id: str = "") -> Patch:
    """Parse a patch file (header + unified diff). Raises PatchTextError on malformed input."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    header, i = _parse_header(lines, source)
    files: List[FilePatch] = []
    while i < len(lines):
        ln = lines[i]
        if ln.startswith(_GIT_LINES):
            if ln.startswith(("new file mode", "deleted file mode", "rename ")):
                raise PatchTextError("creating, deleting or renaming files is not supported",
                                     source=source, line=i + 1)
            i += 1
            continue
        if not ln.strip():
            i += 1
            continue
        fp, i = _parse_file(lines, i, source)
        if any(f.path == fp.path for f in files):
            raise PatchTextError(f"{fp.path} appears twice in the patch", source=source, line=i)
        files.append(fp)
    if not files:
        raise PatchTextError("no diff found (expected '--- a/<path>' / '+++ b/<path>' / '@@' "
                             "lines)", source=source)
    meta = dict(header)
    pid = meta.get("id") or default_id
    if not pid or not _ID_RE.match(pid):
        raise PatchTextError(f"missing or invalid patch id {pid!r} (header '# id: <name>')",
                             source=source, line=1)
    versions = tuple(v.strip() for v in re.split(r"[,\s]+", meta.get("versions", "")) if v.strip())
    return Patch(id=pid, files=tuple(files), description=meta.get("description", ""),
                 package=meta.get("package") or None, versions=versions,
                 original_sha256=_shas(header, source), header=tuple(header), source=source,
                 text=text)


# git's extended header lines, between a `diff` line and the `---` line
_GIT_LINES = ("diff ", "index ", "new file mode", "deleted file mode", "old mode", "new mode",
              "similarity", "rename ")


def _parse_header(lines: Sequence[str], source: str) -> Tuple[List[Tuple[str, str]], int]:
    """The `# key: value` lines before the diff (key lowercased), and where the diff starts."""
    header: List[Tuple[str, str]] = []
    i = 0
    while i < len(lines) and not lines[i].startswith(("--- ", "diff ")):
        ln = lines[i]
        if ln.startswith("#"):
            m = re.match(r"^#\s*([A-Za-z][\w-]*)\s*:\s*(.*)$", ln)
            if m:
                header.append((m.group(1).lower(), m.group(2).strip()))
        elif ln.strip() and not ln.startswith(("index ", "Index:", "=====")):
            raise PatchTextError(f"unexpected text before the diff: {ln[:60]!r} (header lines "
                                 "start with '# key: value')", source=source, line=i + 1)
        i += 1
    return header, i


def _parse_file(lines: Sequence[str], i: int, source: str) -> Tuple[FilePatch, int]:
    """The file patch whose `---` line is lines[i] (its `+++` line, its hunks), and the index
    after it."""
    ln = lines[i]
    if not ln.startswith("--- "):
        raise PatchTextError(f"expected a '--- a/<path>' line, found {ln[:60]!r}",
                             source=source, line=i + 1)
    old = _clean_path(ln[4:], source, i + 1)
    if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
        raise PatchTextError("a '--- ' line must be followed by a '+++ ' line",
                             source=source, line=i + 1)
    new = _clean_path(lines[i + 1][4:], source, i + 2)
    if old is None or new is None:
        raise PatchTextError("creating or deleting files (/dev/null) is not supported",
                             source=source, line=i + 1)
    if old != new:
        raise PatchTextError(f"renames are not supported ({old} -> {new})", source=source,
                             line=i + 1)
    i += 2
    hunks: List[Hunk] = []
    while i < len(lines) and lines[i].startswith("@@"):
        hunk, i = _parse_hunk(lines, i, len(hunks) + 1, source, old)
        hunks.append(hunk)
    if not hunks:
        raise PatchTextError(f"{old}: no hunks after the file header", source=source,
                             line=i + 1)
    return FilePatch(old, tuple(hunks)), i


def _shas(header: Sequence[Tuple[str, str]], source: str) -> Tuple[Tuple[str, str], ...]:
    """The `# sha256: <path> <hex>` headers, as (path, hex)."""
    shas: List[Tuple[str, str]] = []
    for k, v in header:
        if k == "sha256":
            parts = v.split()
            if len(parts) != 2 or not re.match(r"^[0-9a-f]{64}$", parts[1]):
                raise PatchTextError(f"bad sha256 header {v!r} (want '# sha256: <path> <hex>')",
                                     source=source)
            shas.append((parts[0], parts[1]))
    return tuple(shas)


def _parse_hunk(lines: Sequence[str], i: int, number: int, source: str, path: str
                ) -> Tuple[Hunk, int]:
    m = _HUNK_RE.match(lines[i])
    if not m:
        raise PatchTextError(f"{path}: malformed hunk header {lines[i][:60]!r}", source=source,
                             line=i + 1, path=path, hunk=number)
    old_start, new_start = int(m.group(1)), int(m.group(3))
    old_len = int(m.group(2)) if m.group(2) is not None else 1
    new_len = int(m.group(4)) if m.group(4) is not None else 1
    header_line = i + 1
    header = lines[i]
    i += 1
    body: List[HunkLine] = []
    n_old = n_new = 0
    while i < len(lines) and (n_old < old_len or n_new < new_len):
        ln = lines[i]
        tag = ln[:1] if ln else " "  # an empty line: context whose space an editor stripped
        if tag == "\\":
            if body:
                last = body[-1]
                body[-1] = HunkLine(last.tag, last.text, True)
            i += 1
            continue
        if tag not in " -+":
            break
        body.append(HunkLine(tag, ln[1:]))
        n_old += tag in " -"
        n_new += tag in " +"
        i += 1
    if i < len(lines) and lines[i].startswith("\\"):
        if not body:
            raise PatchTextError(
                f"{path}: hunk {number} ({header.strip()}) has a '\\ No newline' marker "
                "with no line before it", source=source, line=i + 1, path=path, hunk=number)
        last = body[-1]
        body[-1] = HunkLine(last.tag, last.text, True)
        i += 1
    if n_old != old_len or n_new != new_len:
        raise PatchTextError(
            f"{path}: hunk {number} ({header.strip()}) has {n_old} old / {n_new} new lines, "
            f"its header says {old_len} / {new_len}", source=source, line=header_line,
            path=path, hunk=number)
    return Hunk(number, header, old_start, old_len, new_start, new_len, tuple(body),
                header_line), i


# ----- applying -------------------------------------------------------------------------------

def _split(text: str) -> List[str]:
    return text.splitlines(keepends=True) if text else []


def _content(line: str) -> str:
    return line[:-1] if line.endswith("\n") else line


def apply_file(text: str, fp: FilePatch, *, source: str = "") -> str:
    """Apply one file's hunks with exact context (a hunk may move, never fuzz)."""
    lines = _split(text)
    out: List[str] = []
    pos = 0  # next unconsumed line of `lines`
    offset = 0
    for h in fp.hunks:
        old = [x.text for x in h.old()]
        want = (h.old_start if h.old_len == 0 else h.old_start - 1) + offset
        at = _find(lines, old, want, pos)
        if at is None:
            raise _mismatch(lines, h, old, max(want, pos), fp.path, source)
        out.extend(lines[pos:at])
        new = h.new()
        for k, x in enumerate(new):
            last_of_file = at + len(old) >= len(lines) and k == len(new) - 1
            if x.no_newline and last_of_file:
                out.append(x.text)
            else:
                out.append(x.text + "\n")
        pos = at + len(old)
        # line numbers are the original file's: later hunks move by the drift found here
        offset = at - (h.old_start if h.old_len == 0 else h.old_start - 1)
    out.extend(lines[pos:])
    return "".join(out)


def _matches_at(lines: Sequence[str], old: Sequence[str], at: int) -> bool:
    if at < 0 or at + len(old) > len(lines):
        return False
    return all(_content(lines[at + k]) == old[k] for k in range(len(old)))


def _find(lines: Sequence[str], old: Sequence[str], want: int, lo: int) -> Optional[int]:
    if want >= lo and _matches_at(lines, old, want):
        return want
    if not old:
        return want if lo <= want <= len(lines) else None
    best: Optional[int] = None
    for at in range(lo, len(lines) - len(old) + 1):
        if _matches_at(lines, old, at) and (best is None or abs(at - want) < abs(best - want)):
            best = at
    return best


def _mismatch(lines: Sequence[str], h: Hunk, old: Sequence[str], at: int, path: str,
              source: str) -> PatchTextError:
    detail = ""
    for k, want in enumerate(old):
        if at + k >= len(lines):
            detail = f"; the file ends at line {len(lines)}"
            break
        got = _content(lines[at + k])
        if got != want:
            detail = f"; line {at + k + 1} is {got.strip()[:70]!r}, the hunk expects " \
                     f"{want.strip()[:70]!r}"
            break
    return PatchTextError(f"{path}: hunk {h.number} ({h.header.strip()}) does not apply: "
                          f"context mismatch{detail}", source=source, line=h.source_line,
                          path=path, hunk=h.number)


def apply_patch(patch: Patch, texts: Dict[str, str], *, reverse: bool = False
                ) -> Dict[str, str]:
    """Apply (or reverse) every file of a patch to in-memory texts; all or nothing."""
    out: Dict[str, str] = {}
    p = patch.reversed() if reverse else patch
    for fp in p.files:
        if fp.path not in texts:
            raise PatchTextError(f"{fp.path}: file not found in this install", path=fp.path,
                                 source=patch.source)
        out[fp.path] = apply_file(texts[fp.path], fp, source=patch.source)
    return out


def file_state(patch_fp: FilePatch, text: str) -> str:
    """'original' (applies forward), 'patched' (applies in reverse), or 'neither'."""
    try:
        apply_file(text, patch_fp)
        return "original"
    except PatchTextError:
        pass
    try:
        apply_file(text, patch_fp.reversed())
        return "patched"
    except PatchTextError:
        return "neither"


# ----- writing ---------------------------------------------------------------------------------

def format_hunk(h: Hunk) -> str:
    out = [h.header.rstrip("\n") + "\n"]
    for x in h.lines:
        out.append(f"{x.tag}{x.text}\n")
        if x.no_newline:
            out.append("\\ No newline at end of file\n")
    return "".join(out)


def format_patch(patch: Patch) -> str:
    """The patch file text: header lines then the diff."""
    head: List[str] = [f"# id: {patch.id}"]
    if patch.description:
        head.append(f"# description: {patch.description}")
    if patch.package:
        head.append(f"# package: {patch.package}")
    if patch.versions:
        head.append(f"# versions: {', '.join(patch.versions)}")
    head.extend(f"# sha256: {p} {h}" for p, h in patch.original_sha256)
    body = "".join(format_file(fp) for fp in patch.files)
    return "\n".join(head) + "\n" + body


def format_file(fp: FilePatch) -> str:
    return f"--- a/{fp.path}\n+++ b/{fp.path}\n" + "".join(format_hunk(h) for h in fp.hunks)


def make_file_patch(path: str, old_text: str, new_text: str, context: int = 3
                    ) -> Optional[FilePatch]:
    """The diff between two texts as a FilePatch (None when they are equal)."""
    a, b = _split(old_text), _split(new_text)
    sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    hunks: List[Hunk] = []
    for group in sm.get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        body: List[HunkLine] = []
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                body.extend(_hl(" ", x) for x in a[a1:a2])
            else:
                body.extend(_hl("-", x) for x in a[a1:a2])
                body.extend(_hl("+", x) for x in b[b1:b2])
        old_start = i1 + 1 if i2 > i1 else i1
        new_start = j1 + 1 if j2 > j1 else j1
        header = f"@@ -{_range(old_start, i2 - i1)} +{_range(new_start, j2 - j1)} @@"
        hunks.append(Hunk(len(hunks) + 1, header, old_start, i2 - i1, new_start, j2 - j1,
                          tuple(body)))
    return FilePatch(path, tuple(hunks)) if hunks else None


def _hl(tag: str, line: str) -> HunkLine:
    return HunkLine(tag, _content(line), not line.endswith("\n"))


def unified_diff(path: str, old_text: str, new_text: str, context: int = 3) -> str:
    fp = make_file_patch(path, old_text, new_text, context)
    return format_file(fp) if fp else ""
