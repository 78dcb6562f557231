"""The one rich Console class ddprobe prints through: host text can neither drive the terminal
nor be read as markup, whatever the caller forgot.

* markup is OFF by default: a string printed is shown as it is (`[link=...]` or a stray
  `[/red]` in a log line is text, never a link or a MarkupError). Code that wants styles builds
  `rich.text.Text` objects (or passes `markup=True` explicitly, with `rich.markup.escape` on
  every piece of host text).
* every string rendered (a table cell, a printed str) is cleaned before rich parses it, and
  every segment rendered, from any renderable (tables, panels, the live status line), has the
  escape sequences and controls of `untrusted.clean` removed; rich's own control segments
  (cursor moves of a live display) and styles are emitted separately and are untouched.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from ddprobe.untrusted import clean, is_clean


class SafeConsole(Console):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        super().__init__(*args, **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        # before rich builds a Text: rich itself drops BEL/BS/CR, which would leave an OSC
        # without its terminator (the net in `render` would then drop the rest of the line)
        return super().render_str(clean(text), **kwargs)

    def render(self, renderable: RenderableType,
               options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for seg in super().render(renderable, options):
            if seg.control or is_clean(seg.text):
                yield seg
            else:
                yield Segment(clean(seg.text).replace("\n", " ") if seg.text != "\n" else "\n",
                              seg.style, None)


    def on_broken_pipe(self) -> None:
        """stdout's reader went away (`| head -1`): rich would exit 1, which a script reads as
        "failure found"; the error boundary turns this into ExitCode.CLOSED_PIPE instead."""
        self.quiet = True
        raise BrokenPipeError


def silence_stdout() -> None:
    """Point stdout at /dev/null after its reader went away, so that nothing written later
    (Python's own flush at exit included) raises again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


PIPE_WIDTH = 400


def make_console(stderr: bool) -> Console:
    """The console: markup off and host text cleaned at render time. NO_COLOR turns colour
    off; stdout to a pipe or file gets PIPE_WIDTH columns (rich would cut tables at 80)."""
    nc = bool(os.environ.get("NO_COLOR"))
    c = SafeConsole(stderr=stderr, no_color=nc, highlight=False, soft_wrap=True)
    if not stderr and not c.is_terminal and not os.environ.get("COLUMNS"):
        c = SafeConsole(stderr=stderr, no_color=nc, highlight=False, soft_wrap=True,
                        width=PIPE_WIDTH)
    return c
