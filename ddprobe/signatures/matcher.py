"""Match server logs against the catalogue: the root-cause signature, its phase, evidence.

`match_log(text)` is what a cell calls; `find_matches` gives every matched entry with context
(phase, line number, hint, details) in priority order, the winner first.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Final

try:  # the regex parser, for required_literal (3.11+ moved it; the old name still works)
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _sre_parse

from ddprobe.results import SIGNATURE_LINE_CAP, Signature
from ddprobe.signatures.catalogue import Catalogue, Entry, load_catalogue
from ddprobe.signatures.normalise import normalise, strip_prefix
from ddprobe.untrusted import first_chars

KEY_FIELD_CAP: Final = 80  # characters of a matched field a key template shows
PHASES: Final = ("startup", "capture", "serving")
_ANSI: Final = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TB_HEADER: Final = "Traceback (most recent call last):"
_FRAME: Final = re.compile(r'^\s*File "(?P<file>[^"]+)", line \d+, in (?P<func>\S+)')
_EXC_LINE: Final = re.compile(r"^(?P<cls>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Fault"
                              r"|Warning|Failure|Exhausted|Timeout)?)(?::\s?(?P<msg>.*))?$")
# A traceback ended by these is a shutdown (ddprobe's own stop), not a failure.
_BENIGN: Final = frozenset({"KeyboardInterrupt", "SystemExit", "asyncio.CancelledError",
                            "asyncio.exceptions.CancelledError", "CancelledError",
                            "GeneratorExit", "BrokenPipeError"})


@dataclass(frozen=True)
class LogMatch:
    """One catalogue entry found in a log, with the evidence around it."""

    signature: Signature
    entry: str  # catalogue entry id
    outcome: str  # crash | refused | garbage | hang (the catalogue's suggestion)
    severity: str
    phase: str  # startup | capture | serving, at the key line
    line_no: int  # 1-based line of the key line in the text
    hint: str = ""
    details: tuple[tuple[str, str], ...] = ()

    @property
    def details_dict(self) -> dict[str, str]:
        return dict(self.details)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["details"] = dict(self.details)
        return d


def match_log(text: str, *, catalogue: Catalogue | None = None) -> Signature | None:
    """The root-cause signature of a log, or None when nothing catalogued is in it."""
    best = best_match(text, catalogue=catalogue)
    return best.signature if best else None


def match_all(text: str, *, catalogue: Catalogue | None = None) -> list[Signature]:
    """Every distinct signature in the log, highest priority first."""
    out: list[Signature] = []
    for m in find_matches(text, catalogue=catalogue):
        if m.signature not in out:
            out.append(m.signature)
    return out


def best_match(text: str, *, catalogue: Catalogue | None = None,
               since: int = 0) -> LogMatch | None:
    matches = find_matches(text, catalogue=catalogue, first_only=True, since=since)
    return matches[0] if matches else None


def find_matches(text: str, *, catalogue: Catalogue | None = None,
                 first_only: bool = False, since: int = 0) -> list[LogMatch]:
    """All catalogue entries found in `text`, in catalogue (priority) order; `since` (a
    0-based line index) ignores the lines before it (phases still see the whole log)."""
    cat = catalogue or load_catalogue()
    clean = _ANSI.sub("", text)
    lines = [strip_prefix(line) for line in clean.splitlines()]
    # a line explains one failure: the highest-priority entry's; the source lines a traceback
    # quotes (`raise RuntimeError(f"NCCL error: {error_str}")`) explain none, unless nothing
    # else in the log does (an excerpt cut before the exception line)
    before = set(range(min(since, len(lines))))
    code = source_lines(lines)
    out = _matches(cat, clean, lines, before | code, first_only)
    if not out and code:
        out = _matches(cat, clean, lines, before, first_only)
    if not out:  # last: a traceback the log (or the excerpt) ends inside of
        out = _matches(cat, clean, lines, before | code, first_only, truncated=True)
    return out


def _matches(cat: Catalogue, clean: str, lines: list[str], claimed: set[int],
             first_only: bool, *, truncated: bool = False) -> list[LogMatch]:
    out: list[LogMatch] = []
    claimed = set(claimed)
    for entry in cat.entries:
        extra: tuple[tuple[str, str], ...] = ()
        if entry.handler == "traceback":
            tb = _traceback_key(lines, claimed, truncated=truncated)
            if tb is None:
                continue
            idx, key, frame, exc = tb
            extra = (("exception", exc), ("frame", frame))
        else:
            found = _pattern_key(entry, clean, lines, claimed)
            if found is None:
                continue
            idx, key = found
        claimed.add(idx)
        phase = entry.phase or _phase_at(cat, lines, idx)
        if phase == "startup" and not entry.phase:
            phase = _phase_of_following_traceback(cat, lines, idx)
        if phase == "capture" and entry.kind != "capture":
            # the same error at capture time and at serving time are different failures
            key = "[capture] " + key
        details = extra + _details(cat, entry, lines, idx, phase)
        line = first_chars(lines[idx].strip(), SIGNATURE_LINE_CAP)
        out.append(LogMatch(signature=Signature(entry.kind, key, line),
                            entry=entry.id, outcome=entry.outcome, severity=entry.severity,
                            phase=phase, line_no=idx + 1, hint=entry.hint, details=details))
        if first_only:
            break
    return out


def source_lines(lines: list[str]) -> set[int]:
    """Indices of the code lines a Python traceback quotes under each `File ..., in f` frame
    (and the `~~~^^^` markers 3.11+ puts under them): code, not messages."""
    out: set[int] = set()
    for i, line in enumerate(lines):
        if not _FRAME.match(line):
            continue
        indent = len(line) - len(line.lstrip())
        for j in range(i + 1, min(i + 3, len(lines))):
            t = lines[j]
            if _FRAME.match(t) or not t.strip() or len(t) - len(t.lstrip()) <= indent:
                break
            if not t.lstrip().startswith("assert "):  # a bare AssertionError's only message
                out.add(j)
    return out


_PYSPY_FRAME: Final = re.compile(r"^\s+\S+ \([\w/.<>-]+:\d+\)\s*$")


def serving_start(text: str, *, catalogue: Catalogue | None = None,
                  frames: bool = True) -> int | None:
    """The 0-based index of the first line that says the server is serving (the ready line,
    the first batch or request; with `frames`, also a traceback frame of the event loop), or
    None when the log never got there."""
    cat = catalogue or load_catalogue()
    serving = _phase_regexes(cat)[2]
    for i, line in enumerate(_ANSI.sub("", text).splitlines()):
        line = strip_prefix(line)
        if serving.search(line) and (frames or not (_FRAME.match(line)
                                                    or _PYSPY_FRAME.match(line))):
            return i
    return None


def classify_phase(text: str, *, line_no: int | None = None,
                   catalogue: Catalogue | None = None) -> str:
    """Where the server was at `line_no` (1-based; default: the end of the log)."""
    cat = catalogue or load_catalogue()
    lines = [strip_prefix(line) for line in _ANSI.sub("", text).splitlines()]
    if not lines:
        return "startup"
    idx = len(lines) - 1 if line_no is None else max(0, min(line_no - 1, len(lines) - 1))
    return _phase_at(cat, lines, idx)


def _pattern_key(entry: Entry, clean: str, lines: list[str],
                 claimed: set[int]) -> tuple[int, str] | None:
    # Cheap prefilter: a literal every match must contain, looked for with `in` (C speed);
    # most entries are absent from most logs.
    live = [(rx, lit) for rx in entry.patterns
            for lit in (required_literal(rx),) if lit is None or lit in clean]
    if not live:
        return None
    for idx, line in enumerate(lines):
        if idx in claimed:
            continue
        for rx, lit in live:
            m = rx.search(line) if lit is None or lit in line else None
            if m is not None and _required_follows(entry, lines, idx):
                return idx, _suffixed(entry, lines, idx, _match_key(entry, rx, m, line))
    return None


def _required_follows(entry: Entry, lines: list[str], idx: int) -> bool:
    """The entry's `requires` pattern within its window after line idx (or none required)."""
    req = entry.requires
    return req is None or any(req.pattern.search(nxt)
                              for nxt in lines[idx + 1: idx + 1 + req.within])


def _match_key(entry: Entry, rx: re.Pattern[str], m: re.Match[str], line: str) -> str:
    if entry.key:
        # the fields verbatim: the template picks stable ones (an Xid's number)
        return entry.key.format_map({k: first_chars(" ".join((v or "").split()), KEY_FIELD_CAP)
                                     for k, v in m.groupdict().items()})
    raw = m.group("key") if "key" in rx.groupindex and m.group("key") else line
    return normalise(raw)


def _suffixed(entry: Entry, lines: list[str], idx: int, key: str) -> str:
    """The key with the entry's suffix (`... in <where>`) when one follows within its window."""
    if entry.suffix is None:
        return key
    for nxt in lines[idx + 1: idx + 1 + entry.suffix.within]:
        sm = entry.suffix.pattern.search(nxt)
        if sm:
            return f"{key} in {normalise(sm.group('key'))}"
    return key


@lru_cache(maxsize=1024)
def required_literal(rx: re.Pattern[str]) -> str | None:
    """The longest literal (3+ chars) that every match of `rx` contains, if one is obvious."""
    if rx.flags & re.IGNORECASE:
        return None
    try:
        seq = _sre_parse.parse(rx.pattern)
    except Exception:
        return None
    runs = [r for r in _literal_runs(list(seq)) if len(r) >= 3]
    return max(runs, key=len) if runs else None


def _literal_runs(seq: list[Any]) -> list[str]:
    runs: list[str] = []
    cur: list[str] = []
    for op, av in seq:
        name = str(op)
        if name == "LITERAL":
            cur.append(chr(av))
            continue
        runs.append("".join(cur))
        cur = []
        if name == "SUBPATTERN":
            runs.extend(_literal_runs(list(av[-1])))
        elif name in ("MAX_REPEAT", "MIN_REPEAT") and av[0] >= 1:
            runs.extend(_literal_runs(list(av[2])))
    runs.append("".join(cur))
    return [r for r in runs if r]


def _traceback_key(lines: list[str], claimed: set[int], *,
                   truncated: bool = False) -> tuple[int, str, str, str] | None:
    """Exception class + message + innermost frame of the first real traceback: (index of the
    exception line, key, the innermost frame as `package/relative/path.py:function`, the
    exception class)."""
    i, n = 0, len(lines)
    # an excerpt cut above its `Traceback (most recent call last):` starts at its first frame
    headless = not any(_TB_HEADER in ln for ln in lines)
    while i < n:
        if _TB_HEADER not in lines[i] and not (headless and _FRAME.match(lines[i])):
            i += 1
            continue
        j, frame = _frames_end(lines, i + 1 if _TB_HEADER in lines[i] else i)
        if truncated and j >= n and frame is not None and i not in claimed:
            # the log (or the excerpt pasted from it) ends inside the traceback
            return _truncated_key(j - 1, frame)
        if j < n and frame is not None:
            found = _exception_key(lines[j], j, frame, claimed)
            if found is not None:
                return found
        i = j if j > i else i + 1
    return None


def _frames_end(lines: list[str], j: int) -> tuple[int, re.Match[str] | None]:
    """(the index of the first line after the traceback's frames from j, the innermost frame)."""
    frame: re.Match[str] | None = None
    while j < len(lines):
        t = lines[j]
        fm = _FRAME.match(t)
        if fm:
            frame = fm
        elif not (t.startswith((" ", "\t")) or not t.strip()):
            break
        j += 1
    return j, frame


def _truncated_key(last: int, frame: re.Match[str]) -> tuple[int, str, str, str]:
    fname = frame.group("file")
    where = f"{fname.rsplit('/', 1)[-1]}:{frame.group('func')}"
    return last, f"truncated traceback (in {where})", \
        f"{package_path(fname)}:{frame.group('func')}", ""


def _exception_key(line: str, j: int, frame: re.Match[str], claimed: set[int]
                   ) -> tuple[int, str, str, str] | None:
    """The key of the exception line that ends a traceback (None: benign, claimed or not an
    exception line)."""
    em = _EXC_LINE.match(line.strip())
    if not em or em.group("cls") in _BENIGN or j in claimed:
        return None
    cls = em.group("cls")
    msg = (em.group("msg") or "").strip()
    head = normalise(f"{cls}: {msg}" if msg else cls)
    where = f"{frame.group('file').rsplit('/', 1)[-1]}:{frame.group('func')}"
    return j, f"{head} (in {where})", \
        f"{package_path(frame.group('file'))}:{frame.group('func')}", cls


_SITE: Final = re.compile(r"^.*/(?:site-packages|dist-packages)/|^.*/(?=(?:sglang|vllm|flashinfer"
                         r"|sgl_kernel|torch|triton)/)")


def package_path(path: str) -> str:
    """A frame's file relative to its installation (`sglang/srt/arg_groups/x_hook.py`), the
    same on every host; a file outside any package keeps its last two components."""
    rel = _SITE.sub("", path.replace("\\", "/"))
    return rel if rel != path else "/".join(path.replace("\\", "/").split("/")[-2:])


@lru_cache(maxsize=8)
def _phase_regexes(cat: Catalogue) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    def join(pats: tuple[re.Pattern[str], ...]) -> re.Pattern[str]:
        # an empty list must match nothing, not everything
        return re.compile("|".join(f"(?:{p.pattern})" for p in pats) or r"(?!x)x", re.I)
    return join(cat.phases.capture_begin), join(cat.phases.capture_end), join(cat.phases.serving)


def _phase_at(cat: Catalogue, lines: list[str], idx: int) -> str:
    """The phase at line idx: decided by the last marker at or before it (scanning back, so a
    failure at the end of a long serving log costs a line or two, not the whole log)."""
    begin, end, serving = _phase_regexes(cat)
    ended = False  # a capture ended after this point: startup, unless serving came first
    for i in range(idx, -1, -1):
        line = lines[i]
        if begin.search(line):
            return "startup" if ended else "capture"
        if end.search(line):
            ended = True
        elif serving.search(line):
            return "serving"
    return "startup"


def _phase_of_following_traceback(cat: Catalogue, lines: list[str], idx: int) -> str:
    """`Scheduler hit an exception: Traceback ...`: the key line comes before the frames that
    say where the server was; read them (to the end of that traceback)."""
    start = next((i for i in range(idx, min(idx + 12, len(lines))) if _TB_HEADER in lines[i]),
                 None)
    if start is None:
        # a stack dump (py-spy's `Thread N (idle): "MainThread"`, faulthandler's): its
        # indented frames say where the server was
        end = idx + 1
        while end < len(lines) and end - idx < 400 and lines[end].startswith((" ", "\t")):
            end += 1
        return _phase_at(cat, lines, end - 1) if end - 1 > idx else "startup"
    end = start + 1
    while end < len(lines) and end - idx < 400 and (
            lines[end].startswith((" ", "\t")) or _TB_HEADER in lines[end]):
        end += 1
    return _phase_at(cat, lines, end - 1) if end - 1 > start else "startup"


def _details(cat: Catalogue, entry: Entry, lines: list[str], idx: int,
             phase: str) -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    for name, rx in cat.phases.details:
        if name.startswith("capture") and phase != "capture":
            continue
        for line in reversed(lines[: idx + 1]):
            m = rx.search(line)
            if m:
                if m.group("v").strip():
                    out[name] = m.group("v").strip()
                break
    for name, rx in entry.details:
        for line in lines[idx:] + lines[:idx]:
            m = rx.search(line)
            if m:
                out[name] = m.group("v").strip()
                break
    return tuple(out.items())
