from __future__ import annotations

__version__ = "0.1.0"


def version_tuple(v: str) -> tuple[int, ...]:
    """`0.5.10.post1` -> (0, 5, 10): the leading numeric parts."""
    out = []
    for part in v.split("."):
        digits = "".join(ch for ch in part if ch.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def decode_separator(reported_version: str) -> str:
    """The punctuation after `Decode batch` in the scheduler's stats line at that version
    (read in the wheels: 0.4.10 and 0.5.2 print `.`, 0.5.5 and later `,`)."""
    return "," if version_tuple(reported_version) >= (0, 5, 5) else "."
