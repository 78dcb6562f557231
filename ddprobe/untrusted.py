"""Text that came from a host (log lines, model answers, package metadata, file names, error
messages): made safe for the place it goes to, in one module every writer uses.

Nothing a host sends may drive the user's terminal (escape sequences: OSC 0 titles, OSC 52
clipboard writes, CSI cursor moves and colours; C1 controls; carriage returns that overwrite a
line; bidirectional overrides that reorder it), be read as rich markup, or break a file format
(XML 1.0 forbids most C0 controls; markdown renders raw HTML and pipes split table cells; a CSV
cell starting with `=` is a formula to a spreadsheet; lone surrogates are not valid UTF-8).

* `clean(s)`: the terminal/log form: escape sequences removed, other controls dropped, newlines
  and tabs kept (`one_line` also folds newlines).
* `excerpt(s, ...)`: a bounded, cleaned tail (or head) of a long text for reports and journals.
* `first_chars(s, cap)`, `last_chars(s, cap)`: a host text bounded where it is kept or quoted
  (a signature's line, an error message), nothing else changed; each caller names its cap.
* `for_xml`, `for_csv`, `md_cell`, `md_code`, `for_json`: the per-format escapes.
* `text(s, style)`: a rich `Text` of host text (never parsed as markup).
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # rich is imported by `text` when it is called
    from rich.text import Text

# ESC-introduced sequences (ECMA-48): CSI ... final byte; OSC/DCS/SOS/PM/APC ... up to ST or BEL
# (or the end of the text: an unterminated OSC must not leak its payload either); any other
# ESC + one byte (charset selection, RIS `ESC c`, keypad modes).
_ESC_SEQ: Final = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC, DCS, SOS, PM, APC
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # 8-bit CSI
    r"|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # 8-bit DCS/SOS/OSC/PM/APC
    r"|\x1b[ -~]?",  # two-byte escapes, or a lone ESC
    re.S)
# What is left after the sequences: C0 (but tab and newline), DEL, C1, and the bidi controls that
# reorder what a terminal shows (CVE-2021-42574 "trojan source").
_CONTROLS: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# XML 1.0 Char production: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]
_XML_ILLEGAL: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_CSV_FORMULA: Final = ("=", "+", "-", "@")
_MD_SPECIAL: Final = re.compile(r"([\\`|\[\]])")
REPLACEMENT: Final = "\ufffd"


def clean(s: object) -> str:
    """Host text for a terminal or a log: escape sequences and controls removed.

    CR LF becomes LF; a lone CR (which would let a line overwrite what came before it on the
    terminal) becomes LF too. Tabs and newlines stay.
    """
    t = s if isinstance(s, str) else str(s)
    if not _needs_work(t):
        return t
    t = t.replace("\r\n", "\n").replace("\r", "\n")
    t = _ESC_SEQ.sub("", t)
    t = _CONTROLS.sub("", t)
    return _SURROGATE.sub(REPLACEMENT, t)


def _needs_work(t: str) -> bool:
    return bool(_CONTROLS.search(t) or "\r" in t or _SURROGATE.search(t))


def is_clean(s: str) -> bool:
    """True when `clean(s) == s` (nothing a terminal would interpret)."""
    return not _needs_work(s)


def one_line(s: object, limit: int = 240) -> str:
    """Cleaned, newlines folded into ` | `, at most `limit` characters (`...` when cut)."""
    t = " | ".join(p.strip() for p in clean(s).splitlines() if p.strip())
    t = t.replace("\t", " ")
    return t if len(t) <= limit else t[:max(0, limit - 3)] + "..."


def first_chars(s: str, cap: int) -> str:
    """At most the first `cap` characters of a host text (no marker, not cleaned: it is cleaned
    where it is shown). The one spelling of a bare `s[:cap]` on untrusted text."""
    return s[:max(0, cap)]


def last_chars(s: str, cap: int) -> str:
    """At most the last `cap` characters of a host text (an error's tail), as `first_chars`."""
    return s[-cap:] if cap > 0 else ""


def excerpt(s: object, *, max_chars: int = 4000, max_lines: int = 40, tail: bool = True) -> str:
    """A bounded, cleaned excerpt: the last (or first) `max_lines` lines and `max_chars`
    characters, with one line saying how much was left out."""
    t = clean(s)
    # bound the work on a huge text before splitting it into lines
    window = max_chars * 2
    pre_cut = max(0, len(t) - window)
    t = t[-window:] if tail else t[:window]
    lines = t.splitlines()
    cut_lines = max(0, len(lines) - max_lines)
    lines = lines[-max_lines:] if tail else lines[:max_lines]
    body = "\n".join(lines)
    cut_chars = max(0, len(body) - max_chars)
    if cut_chars:
        body = body[-max_chars:] if tail else body[:max_chars]
    if not (pre_cut or cut_lines or cut_chars):
        return body
    note = f"[... {pre_cut + cut_chars} characters, {cut_lines}+ lines left out ...]"
    return f"{note}\n{body}" if tail else f"{body}\n{note}"


def text(s: object, style: str = "") -> Text:
    """A rich Text of host text: cleaned, and never parsed as markup (`[/red]` stays text)."""
    from rich.text import Text
    return Text(clean(s), style=style)


def for_xml(s: object) -> str:
    """Text legal in an XML 1.0 document (JUnit): cleaned, then every character XML 1.0 forbids
    replaced with U+FFFD. ElementTree escapes `<&>"` itself."""
    return _XML_ILLEGAL.sub(REPLACEMENT, clean(s))


def for_csv(v: Any) -> Any:
    """A CSV cell: text cleaned (newlines folded); a text starting like a formula (`=`, `+`,
    `-`, `@`) that is not a number gets a leading `'` so a spreadsheet shows it as text."""
    if not isinstance(v, str):
        return v
    t = one_line(v, limit=10_000)
    if t.startswith(_CSV_FORMULA) and not _is_number(t):
        t = "'" + t
    return t


def _is_number(t: str) -> bool:
    try:
        float(t)
        return True
    except ValueError:
        return False


def md_text(s: object, limit: int = 2000) -> str:
    """Text safe inside a markdown table cell or a list item: cleaned, one line, the syntax
    that changes what a reader sees escaped (markdown renders raw HTML, `[..](..)` is a link,
    a `|` splits a table cell, a backtick opens code)."""
    t = _MD_SPECIAL.sub(r"\\\1", one_line(s, limit=limit))
    return t.replace("<", "&lt;").replace(">", "&gt;")


def md_code(s: object, *, table: bool = False) -> str:
    """An inline code span holding any text: the fence is one backtick longer than the longest
    run of backticks inside (CommonMark), and the text is cleaned and on one line. In a table
    cell a `|` must be escaped even inside code (GFM)."""
    t = one_line(s, limit=2000)
    if table:
        t = t.replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", t)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if t.startswith("`") or t.endswith("`") or not t.strip() else ""
    return f"{fence}{pad}{t}{pad}{fence}"


def md_block(s: object, *, max_chars: int = 4000, max_lines: int = 40) -> str:
    """A fenced code block holding a bounded, cleaned excerpt (the fence outlasts any inside)."""
    t = excerpt(s, max_chars=max_chars, max_lines=max_lines)
    longest = max((len(m) for m in re.findall(r"`{3,}|~{3,}", t)), default=2)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{t}\n{fence}"


def for_json(obj: Any) -> Any:
    """A JSON-ready structure with lone surrogates (undecodable bytes kept by `surrogateescape`,
    invalid in UTF-8 and refused by strict parsers) replaced. Controls are escaped by json."""
    if isinstance(obj, str):
        return _SURROGATE.sub(REPLACEMENT, obj) if _SURROGATE.search(obj) else obj
    if isinstance(obj, dict):
        return {for_json(k): for_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [for_json(v) for v in obj]
    return obj


def dumps_json(obj: Any, **kw: Any) -> str:
    """json.dumps whose output is valid UTF-8 JSON even when host text held undecodable bytes
    (lone surrogates, which `json` writes as `\\udcxx` and strict parsers refuse)."""
    out = json.dumps(obj, **kw)
    if "\\ud" in out or _SURROGATE.search(out):
        kw.pop("default", None)
        out = json.dumps(for_json(json.loads(out)), **kw)
    return out


_FILE_OK: Final = re.compile(r"[^A-Za-z0-9._+@=-]")


def file_part(s: object, limit: int = 80) -> str:
    """A name from a host, an inventory or a config made safe as ONE path component: only
    `[A-Za-z0-9._+@=-]`, no leading dot (so never `.`, `..` or hidden), at most `limit`
    characters. A name that had to change gets a short hash of the original, so two different
    names never map to the same file."""
    t = str(s)
    safe = _FILE_OK.sub("_", t).lstrip(".") or "_"
    if safe == t and len(t) <= limit:
        return t
    tag = hashlib.sha256(t.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{safe[:max(1, limit - 9)]}-{tag}"
