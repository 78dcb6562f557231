"""Host Python sources parsed with `ast`: everything that parsing host text can raise.

The text is the host's (read with `surrogateescape`: an undecodable byte is a lone surrogate),
so besides a SyntaxError it may be a ValueError (a NUL byte on Python 3.11; a lone surrogate is
a UnicodeEncodeError), or a RecursionError or MemoryError for absurd nesting. Every reader of
host sources catches these, never SyntaxError alone.
"""
from __future__ import annotations

from typing import Final

UNPARSABLE: Final = (SyntaxError, ValueError, RecursionError, MemoryError)


def why(e: BaseException) -> str:
    """One line on why a text did not parse."""
    if isinstance(e, SyntaxError):
        return str(e.msg)
    if isinstance(e, (RecursionError, MemoryError)):
        return "nested too deeply"
    return str(e).split("\n")[0]
