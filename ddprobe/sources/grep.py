"""`ddprobe grep`: search an install's sources on the host, as structured hits.

ripgrep (`rg --json`) when the host has it, else `grep -rnIZ` with one matcher (`-F`, `-P` where
grep has PCRE, else `-E`); the result names the tool and the regex dialect it used; the pattern
always travels as an argv word (`-e PATTERN`), so any character is safe. Paths come back
relative to the package.
"""
from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ddprobe import remote
from ddprobe.hostside.client import Install, call
from ddprobe.inventory import Host
from ddprobe.remote import Remote


@dataclass(frozen=True)
class GrepHit:
    file: str  # relative to the package directory
    line: int
    text: str
    kind: str = "match"  # match | context


@dataclass(frozen=True)
class GrepResult:
    host: str
    install: Install
    pattern: str
    tool: str  # rg | grep
    hits: tuple[GrepHit, ...]
    truncated: bool = False
    dialect: str = ""  # fixed | rust-regex (rg) | pcre (grep -P) | ere (grep -E)

    @property
    def matches(self) -> tuple[GrepHit, ...]:
        return tuple(h for h in self.hits if h.kind == "match")

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "install": self.install.to_dict(), "pattern": self.pattern,
                "tool": self.tool, "dialect": self.dialect, "truncated": self.truncated,
                "hits": [h.__dict__ for h in self.hits]}


def grep(r: Remote, pattern: str, *, host: Host | None = None, subdir: str | None = None,
         context: int = 0, fixed: bool = False, ignore_case: bool = False,
         include: Sequence[str] = (), use_rg: bool = True, tool: str = "auto",
         max_hits: int = 5000) -> GrepResult:
    """tool: auto (ripgrep where the host has it, else grep), rg (required) or grep."""
    h = host if host is not None else r.host
    if tool not in ("auto", "rg", "grep"):
        raise ValueError(f"tool must be auto, rg or grep, not {tool!r}")
    if not use_rg:
        tool = "grep"
    res = call(r, "grep", {"package": h.package, "pattern": pattern, "subdir": subdir,
                           "context": context, "fixed": fixed,
                           "ignore_case": ignore_case, "include": list(include),
                           "tool": tool}, program="sources", timeout=120)
    root, output = res.text("root").rstrip("/") + "/", res.text("output")
    parse = _parse_rg if res["tool"] == "rg" else _parse_grep
    # rg searches in parallel: order by file and line so runs and hosts compare
    hits = sorted(parse(output, root), key=lambda x: (x.file, x.line))
    truncated = bool(res.get("truncated")) or len(hits) > max_hits
    return GrepResult(h.name, Install.from_dict(res["install"]), pattern, res["tool"],
                      tuple(hits[:max_hits]), truncated, str(res.get("dialect") or ""))


def _rel(path: str, root: str) -> str:
    return path[len(root):] if path.startswith(root) else path


def _rg_text(d: dict[str, Any]) -> str:
    if "text" in d:
        return str(d["text"])
    return base64.b64decode(d.get("bytes", "")).decode("utf-8", "replace")


def _parse_rg(out: str, root: str) -> list[GrepHit]:
    hits: list[GrepHit] = []
    for line in out.splitlines():
        try:
            ev = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(ev, dict) or ev.get("type") not in ("match", "context"):
            continue
        try:
            d = ev["data"]
            text = _rg_text(d["lines"]).rstrip("\n").rstrip("\r")
            number = d["line_number"]
            if not isinstance(number, int) or isinstance(number, bool):
                continue
            hits.append(GrepHit(_rel(_rg_text(d["path"]), root), number, text, ev["type"]))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue  # an event of another shape (host text): not a hit, like a non-JSON line
    return hits


def _parse_grep(out: str, root: str) -> list[GrepHit]:
    """`grep -rnZ` lines: FILE\\0NUM:TEXT (match) or FILE\\0NUM-TEXT (context); `--` separators."""
    hits: list[GrepHit] = []
    for line in out.split("\n"):
        if not line or line == "--" or "\0" not in line:
            continue
        path, _, rest = line.partition("\0")
        num = ""
        k = 0
        while k < len(rest) and rest[k] in "0123456789":  # str.isdigit takes "²", int() not
            num += rest[k]
            k += 1
        if not num or len(num) > 12 or k >= len(rest) or rest[k] not in ":-":
            continue
        hits.append(GrepHit(_rel(path, root), int(num), rest[k + 1:].rstrip("\r"),
                            "match" if rest[k] == ":" else "context"))
    return hits


@dataclass(frozen=True)
class HostGrep:
    host: str
    status: str  # ok | failed | unreachable | timeout
    result: GrepResult | None = None
    error: str | None = None


@dataclass(frozen=True)
class Comparison:
    """A matching line and where each host has it (line number) or not (None)."""

    file: str
    text: str
    lines: dict[str, int | None] = field(default_factory=dict)

    @property
    def differs(self) -> bool:
        return len(set(self.lines.values())) > 1


def grep_hosts(hosts: Sequence[Host], pattern: str, *, opts: remote.RemoteOptions,
               deadline: float = 120.0, **kw: Any) -> list[HostGrep]:
    """The same search on several hosts in parallel (reached with `opts`); one host's failure
    does not stop others."""
    def one(h: Host) -> GrepResult:
        with remote.connect(h, opts) as r:
            return grep(r, pattern, host=h, **kw)

    outcomes = remote.fan_out(hosts, one, max_workers=16, deadline=deadline)
    return [HostGrep(o.host.name, o.status, o.value, o.error) for o in outcomes]


def compare(results: Sequence[HostGrep]) -> list[Comparison]:
    """Side by side: each (file, stripped text) with the line it is at on each host."""
    ok = [r for r in results if r.result is not None]
    table: dict[tuple[str, str], dict[str, int | None]] = {}
    for r in ok:
        assert r.result is not None
        for hit in r.result.matches:
            key = (hit.file, hit.text.strip())
            table.setdefault(key, {})
            if table[key].get(r.host) is None:
                table[key][r.host] = hit.line
    out = []
    for (file, text), lines in sorted(table.items()):
        out.append(Comparison(file, text, {r.host: lines.get(r.host) for r in ok}))
    return out
