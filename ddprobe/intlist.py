"""The one parser of integer lists (`--budgets 8,16,32`, `--max-bs 64,default`), for the
command line and for the session logs that repeat its command lines (issue 26.3).

One rule set: values separated by commas, blanks around a value ignored, an empty item
skipped; every value a positive decimal integer; at least one value. Where a list may name the
host's own setting (`--max-bs` of a sweep), the words `default`, `none` and `-` stand for it
(None). The order is kept; `budget_set` is the sorted set a bisect or a sweep searches.
"""
from __future__ import annotations

import re

DEFAULT_WORDS = ("default", "none", "-")
_INT = re.compile(r"[+-]?[0-9]+")  # decimal, ASCII digits only (int() takes others too)
MAX_DIGITS = 18  # Python's int() refuses thousands of digits (ValueError); no list needs 19


class IntListError(ValueError):
    """A list that breaks the rules; the message says which value and why (no flag name: the
    caller adds where it came from)."""


def parse_ints(text: str) -> tuple[int, ...]:
    """`8,16, 32` -> (8, 16, 32); IntListError otherwise."""
    return tuple(_positive(w) for w in _words(text))


def parse_ints_or_default(text: str) -> tuple[int | None, ...]:
    """As parse_ints, with `default`/`none`/`-` as None (the host's own setting)."""
    return tuple(None if w.lower() in DEFAULT_WORDS else _positive(w) for w in _words(text))


def budget_set(values: tuple[int, ...]) -> tuple[int, ...]:
    """The budgets a bisect or sweep searches: sorted, each once."""
    return tuple(sorted(set(values)))


def _words(text: str) -> list[str]:
    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words:
        raise IntListError("no values given")
    return words


def _positive(word: str) -> int:
    if not _INT.fullmatch(word):
        raise IntListError(f"expected comma-separated integers, got {word!r}")
    if len(word.lstrip("+-")) > MAX_DIGITS:
        raise IntListError(f"a value of more than {MAX_DIGITS} digits")
    value = int(word)
    if value <= 0:
        raise IntListError(f"values must be positive, got {value}")
    return value
