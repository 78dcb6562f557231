"""Load and validate the failure-signature catalogue (catalogue.yaml, a data file).

The catalogue is data so that a new failure string is a one-line change with a test, not code.
Validation turns every mistake in the file into one ConfigError naming file, line and key.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Final

from ddprobe.errors import ConfigError
from ddprobe.yamlio import line_of, load_yaml

# "error" is infrastructure (a port in use, a broken launch): never blamed on the server
OUTCOMES: Final = ("crash", "refused", "garbage", "hang", "error")
SEVERITIES: Final = ("fatal", "error", "warning")
HANDLERS: Final = ("traceback",)
_ENTRY_KEYS: Final = frozenset({"id", "kind", "outcome", "severity", "patterns", "handler",
                                "suffix", "details", "hint", "key", "requires", "phase"})
# ` #` starts a YAML comment inside a plain (unquoted) scalar: a hint written as
# `... (sglang PR #19177)` silently ends at "(sglang PR". Comments must be whole lines.
_BLOCK_START: Final = re.compile(r":\s*[>|][-+]?\d*\s*$")
_TRAILING_COMMENT: Final = re.compile(r"""^(?P<body>[^#'"]*?\S)\s+#""")


@dataclass(frozen=True)
class Suffix:
    """A regex looked for in the `within` lines after the key line; its `key` group is appended."""

    pattern: re.Pattern[str]
    within: int


@dataclass(frozen=True)
class Requires:
    """A regex that must match one of the `within` lines after the key line, or the entry does
    not match there (compute-sanitizer's `Address ... is misaligned` under an invalid read)."""

    pattern: re.Pattern[str]
    within: int


@dataclass(frozen=True)
class Entry:
    id: str
    kind: str
    outcome: str
    severity: str
    patterns: tuple[re.Pattern[str], ...]
    handler: str | None = None
    suffix: Suffix | None = None
    details: tuple[tuple[str, re.Pattern[str]], ...] = ()
    hint: str = ""
    # a fixed key (format fields: the pattern's named groups): spellings of one failure from
    # different libraries (torch's `CUDA error:`, FlashInfer's `CUDA Error:`) give one key
    key: str = ""
    requires: Requires | None = None
    phase: str = ""  # the phase the message itself implies ("" = from the log's markers)


@dataclass(frozen=True)
class Phases:
    capture_begin: tuple[re.Pattern[str], ...]
    capture_end: tuple[re.Pattern[str], ...]
    serving: tuple[re.Pattern[str], ...]
    details: tuple[tuple[str, re.Pattern[str]], ...]


@dataclass(frozen=True)
class Catalogue:
    version: int
    entries: tuple[Entry, ...]
    phases: Phases
    path: str

    def entry(self, entry_id: str) -> Entry:
        for e in self.entries:
            if e.id == entry_id:
                return e
        raise KeyError(entry_id)


def default_path() -> Path:
    return Path(str(resources.files("ddprobe.signatures").joinpath("catalogue.yaml")))


@lru_cache(maxsize=8)
def load_catalogue(path: str | None = None) -> Catalogue:
    """Parse and validate a catalogue file (the bundled one by default); cached per path."""
    p = path or str(default_path())
    _check_comments(p)
    doc = load_yaml(p)
    if not isinstance(doc, dict):
        raise ConfigError("the catalogue must be a mapping with 'entries'", path=p, line=1)
    version = doc.get("version", 1)
    if not isinstance(version, int):
        raise ConfigError("'version' must be an integer", path=p, line=line_of(doc, "version"),
                          key="version")
    entries_raw = doc.get("entries")
    if not isinstance(entries_raw, list) or not entries_raw:
        raise ConfigError("'entries' must be a non-empty list", path=p,
                          line=line_of(doc, "entries"), key="entries")
    entries: list[Entry] = []
    seen: set[str] = set()
    for i, raw in enumerate(entries_raw):
        entry = _entry(raw, p, i)
        if entry.id in seen:
            raise ConfigError(f"duplicate entry id '{entry.id}'", path=p, line=line_of(raw, "id"),
                              key="id")
        seen.add(entry.id)
        entries.append(entry)
    return Catalogue(version=version, entries=tuple(entries),
                     phases=_phases(doc.get("phases") or {}, p), path=p)


def _entry(raw: Any, path: str, index: int) -> Entry:
    if not isinstance(raw, dict):
        raise ConfigError(f"entry #{index + 1} must be a mapping", path=path)
    line = line_of(raw)
    _check_entry_keys(raw, path, index, line)
    outcome = _one_of(raw, "outcome", None, OUTCOMES, path,
                      f"'outcome' must be one of {', '.join(OUTCOMES)}, not '{raw['outcome']}'")
    severity = _one_of(raw, "severity", "fatal", SEVERITIES, path,
                       f"'severity' must be one of {', '.join(SEVERITIES)}")
    handler = raw.get("handler")
    if handler is not None:
        _one_of(raw, "handler", None, HANDLERS, path,
                f"'handler' must be one of {', '.join(HANDLERS)}")
    patterns = _patterns(raw, handler, path, line)
    suffix = _suffix(raw["suffix"], raw, path) if raw.get("suffix") is not None else None
    requires = _requires(raw["requires"], raw, path) if raw.get("requires") is not None \
        else None
    hint = raw.get("hint")
    if not isinstance(hint, str) or not hint.strip():
        raise ConfigError(f"entry '{raw['id']}' needs a non-empty 'hint'", path=path,
                          line=line_of(raw, "hint") if "hint" in raw else line, key="hint")
    key = _key(raw, patterns, path)
    phase = _one_of(raw, "phase", "", ("", "startup", "capture", "serving"), path,
                    "'phase' must be startup, capture or serving")
    return Entry(id=raw["id"], kind=raw["kind"], outcome=outcome, severity=severity,
                 patterns=patterns, handler=handler, suffix=suffix,
                 details=_details(raw.get("details") or {}, path, "details"),
                 hint=" ".join(hint.split()), key=key, requires=requires, phase=phase)


def _check_entry_keys(raw: dict[str, Any], path: str, index: int, line: int | None) -> None:
    """No unknown key; the required ones are non-empty strings."""
    unknown = set(raw) - _ENTRY_KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise ConfigError(f"unknown key '{key}' in entry #{index + 1}", path=path,
                          line=line_of(raw, key), key=key)
    for req in ("id", "kind", "outcome"):
        if not isinstance(raw.get(req), str) or not raw[req]:
            raise ConfigError(f"entry #{index + 1} needs a string '{req}'", path=path,
                              line=line_of(raw, req) if req in raw else line, key=req)


def _one_of(raw: dict[str, Any], key: str, default: Any, allowed: Sequence[Any], path: str,
            message: str) -> Any:
    value = raw.get(key, default)
    if value not in allowed:
        raise ConfigError(message, path=path, line=line_of(raw, key), key=key)
    return value


def _patterns(raw: dict[str, Any], handler: str | None, path: str, line: int | None
              ) -> tuple[re.Pattern[str], ...]:
    pats_raw = raw.get("patterns") or []
    if not isinstance(pats_raw, list) or (not pats_raw and handler is None):
        raise ConfigError(f"entry '{raw['id']}' needs a list of 'patterns'", path=path,
                          line=line_of(raw, "patterns") if "patterns" in raw else line,
                          key="patterns")
    return tuple(_regex(s, path, line_of(raw, "patterns"), "patterns") for s in pats_raw)


def _within(m: dict[str, Any], path: str, key: str) -> int:
    within = m.get("within", 3)
    if not isinstance(within, int) or within < 1:
        raise ConfigError(f"'{key}.within' must be a positive integer", path=path,
                          line=line_of(m, "within"), key=f"{key}.within")
    return within


def _suffix(s: Any, raw: dict[str, Any], path: str) -> Suffix:
    if not isinstance(s, dict) or "pattern" not in s:
        raise ConfigError("'suffix' must be a mapping with 'pattern' and 'within'",
                          path=path, line=line_of(raw, "suffix"), key="suffix")
    rx = _regex(s["pattern"], path, line_of(s, "pattern"), "suffix.pattern")
    if "key" not in rx.groupindex:
        raise ConfigError("'suffix.pattern' needs a named group 'key'", path=path,
                          line=line_of(s, "pattern"), key="suffix.pattern")
    return Suffix(rx, _within(s, path, "suffix"))


def _requires(q: Any, raw: dict[str, Any], path: str) -> Requires:
    if not isinstance(q, dict) or "pattern" not in q:
        raise ConfigError("'requires' must be a mapping with 'pattern' and 'within'",
                          path=path, line=line_of(raw, "requires"), key="requires")
    within = _within(q, path, "requires")
    return Requires(_regex(q["pattern"], path, line_of(q, "pattern"), "requires.pattern"),
                    within)


def _key(raw: dict[str, Any], patterns: Sequence[re.Pattern[str]], path: str) -> str:
    """The signature key template: a string whose {fields} every pattern captures."""
    key = raw.get("key", "")
    if not isinstance(key, str):
        raise ConfigError("'key' must be a string", path=path, line=line_of(raw, "key"),
                          key="key")
    names = set().union(*(rx.groupindex for rx in patterns)) if patterns else set()
    for field_name in re.findall(r"\{(\w*)\}", key):
        if field_name not in names or not all(field_name in rx.groupindex for rx in patterns):
            raise ConfigError(f"'key' uses {{{field_name}}}, which not every pattern captures",
                              path=path, line=line_of(raw, "key"), key="key")
    return key


def _check_comments(path: str) -> None:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return  # load_yaml reports a missing or unreadable file
    block_indent: int | None = None  # inside a `>-` / `|` block: `#` is text there
    for n, line in enumerate(text.splitlines(), 1):
        indent = len(line) - len(line.lstrip())
        if block_indent is not None:
            if not line.strip() or indent > block_indent:
                continue
            block_indent = None
        if _BLOCK_START.search(line):
            block_indent = indent
        if not line.lstrip().startswith("#") and _TRAILING_COMMENT.match(line):
            raise ConfigError("a ' #' after a value starts a YAML comment and cuts the value "
                              "short: quote the value, or put the comment on its own line",
                              path=path, line=n)


def _phases(raw: Any, path: str) -> Phases:
    if not isinstance(raw, dict):
        raise ConfigError("'phases' must be a mapping", path=path, key="phases")

    def pats(name: str) -> tuple[re.Pattern[str], ...]:
        items = raw.get(name) or []
        if not isinstance(items, list):
            raise ConfigError(f"'phases.{name}' must be a list", path=path,
                              line=line_of(raw, name), key=f"phases.{name}")
        return tuple(_regex(s, path, line_of(raw, name), f"phases.{name}", ignore_case=True)
                     for s in items)

    return Phases(capture_begin=pats("capture_begin"), capture_end=pats("capture_end"),
                  serving=pats("serving"),
                  details=_details(raw.get("details") or {}, path, "phases.details",
                                   ignore_case=True))


def _details(raw: Any, path: str, where: str, *,
             ignore_case: bool = False) -> tuple[tuple[str, re.Pattern[str]], ...]:
    if not isinstance(raw, dict):
        raise ConfigError(f"'{where}' must be a mapping of name -> regex", path=path, key=where)
    out = []
    for name, src in raw.items():
        rx = _regex(src, path, line_of(raw, name), f"{where}.{name}", ignore_case=ignore_case)
        if "v" not in rx.groupindex:
            raise ConfigError(f"'{where}.{name}' needs a named group 'v'", path=path,
                              line=line_of(raw, name), key=f"{where}.{name}")
        out.append((str(name), rx))
    return tuple(out)


def _regex(src: Any, path: str, line: int | None, key: str, *,
           ignore_case: bool = False) -> re.Pattern[str]:
    if not isinstance(src, str) or not src:
        raise ConfigError("a pattern must be a non-empty string", path=path, line=line, key=key)
    try:
        return re.compile(src, re.IGNORECASE if ignore_case else 0)
    except re.error as e:
        raise ConfigError(f"bad regex {src!r}: {e}", path=path, line=line, key=key) from None
