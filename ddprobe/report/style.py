"""Outcome and verdict colours and words, shared by every renderer (terminal, markdown, HTML).

One table so the grid in the HTML, the terminal matrix and the legend never disagree.
"""
from __future__ import annotations

from typing import Any, Final

from ddprobe.results import VerdictKind

# Outcome -> (hex colour for HTML/SVG, rich style for the terminal, short legend text)
OUTCOME_STYLE: Final[dict[str, tuple[str, str, str]]] = {
    "ok": ("#2e7d32", "bold green", "correct output"),
    "crash": ("#c62828", "bold red", "server died"),
    "garbage": ("#ef6c00", "bold dark_orange", "wrong output"),
    "hang": ("#6a1b9a", "bold magenta", "never healthy"),
    "degraded": ("#f9a825", "bold yellow", "slow"),
    "refused": ("#546e7a", "bold blue", "flags refused"),
    "error": ("#9e9e9e", "dim", "infrastructure (skip)"),
    "flaky": ("#8d6e63", "bold yellow", "repeats disagree"),
    "not-run": ("#eceff1", "dim", "not run"),
}

VERDICT_STYLE: Final[dict[VerdictKind, tuple[str, str]]] = {
    "buffer_sizing": ("#c62828", "bold red"),
    "graph_capture": ("#ef6c00", "bold dark_orange"),
    "kernel": ("#6a1b9a", "bold magenta"),
    "config_error": ("#546e7a", "bold blue"),
    "inconclusive": ("#757575", "bold"),
    "flaky": ("#8d6e63", "bold yellow"),
    "ok": ("#2e7d32", "bold green"),
}

# Terminal styles of the statuses that are not cell outcomes: a server start, a log that ends
# before it decides (classify), a smoke check (JUnit case).
STATUS_RICH: Final[dict[str, str]] = {
    "healthy": "bold green", "started": "bold green", "incomplete": "bold yellow",
    "pass": "bold green", "failure": "bold red", "skipped": "dim",
}

# Chart series colours by mode (graph / eager), then a fallback cycle for other hosts.
SERIES_COLOURS: Final[tuple[str, ...]] = ("#1565c0", "#00897b", "#5e35b1", "#6d4c41",
                                          "#d81b60", "#3949ab")


def outcome_colour(outcome: str) -> str:
    return OUTCOME_STYLE.get(outcome, OUTCOME_STYLE["error"])[0]


def outcome_rich(outcome: str) -> str:
    return OUTCOME_STYLE.get(outcome, OUTCOME_STYLE["error"])[1]


def status_rich(status: str) -> str:
    """The terminal style of an outcome or another status (STATUS_RICH); unknown: plain."""
    if status in STATUS_RICH:
        return STATUS_RICH[status]
    return OUTCOME_STYLE[status][1] if status in OUTCOME_STYLE else ""


def verdict_colour(kind: VerdictKind) -> str:
    return VERDICT_STYLE.get(kind, VERDICT_STYLE["inconclusive"])[0]


def verdict_rich(kind: VerdictKind) -> str:
    return VERDICT_STYLE.get(kind, VERDICT_STYLE["inconclusive"])[1]


def verdict_words(kind: str) -> str:
    return kind.replace("_", " ")


def text_on(colour: str) -> str:
    """Black or white text, whichever reads better on `colour` (#rrggbb)."""
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return "#000000" if (0.299 * r + 0.587 * g + 0.114 * b) > 150 else "#ffffff"


def fmt_accept(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}"


def fmt_tok_s(v: float | None) -> str:
    return "" if v is None else f"{v:.0f}"


def fmt_secs(v: float | None) -> str:
    if v is None:
        return ""
    return f"{v:.1f}s" if v < 120 else f"{v / 60:.1f}min"


def restarts_line(used: int, full: int | None) -> str:
    if full:
        return f"{used} restarts (a full sweep: {full})"
    return f"{used} restarts"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def buffer_sizes(buffer: dict[str, Any]) -> str:
    """'b8 1.2 MiB, b16 1.2 MiB (short by 4096 elements)' from a verdict's buffer sizes."""
    parts = []
    for s in buffer.get("sizes") or ():
        if not isinstance(s, dict) or "budget" not in s:
            continue
        if isinstance(s.get("bytes"), (int, float)):
            size = fmt_bytes(s["bytes"])
        elif s.get("elements") is not None:
            size = f"{s['elements']} elements"
        else:
            continue  # not evaluable (a sizing variable was unknown): say nothing
        short = f" (short by {s['short_by']} elements)" if s.get("short_by") else ""
        parts.append(f"b{s['budget']} {size}{short}")
    return ", ".join(parts)


def buffer_where(buffer: dict[str, Any]) -> str:
    return f"{buffer.get('file', '?')}:{buffer.get('line', '?')}"


def buffer_shape(buffer: dict[str, Any]) -> str:
    return str(buffer.get("expr") or buffer.get("shape") or "")


def failure_text(outcome: str, signature: str | None) -> str:
    """`garbage: accept_length=1.01 coding 0/8`, never `garbage: garbage: ...` (a garbage
    signature's id already starts with its outcome)."""
    if not signature:
        return outcome
    if signature == outcome or signature.startswith(f"{outcome}: "):
        return signature
    return f"{outcome}: {signature}"
