"""A server log classified on its own (`ddprobe classify`) in a terminal."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from ddprobe.report.style import status_rich
from ddprobe.untrusted import clean, first_chars

DETAIL_CAP = 200  # characters of each detail shown
KEY_LINE_CAP = 300  # characters of the key log line shown

if TYPE_CHECKING:
    from ddprobe.cell.logverdict import LogVerdict


def render_log_verdict(v: LogVerdict, out: Console, why: str | None = None) -> None:
    """`ddprobe classify`: the outcome (or `suspect`, with why), the signature and its key
    line, the hint, the details, the decode lines' summary, the notes."""
    shown = "suspect" if why else v.outcome
    out.print(Text.assemble(("outcome: ", "bold"), (shown, status_rich(v.outcome if not why
                                                                          else "garbage")),
                            f"  (phase: {v.phase}" + ("; no failure signature" if why else "")
                            + ")"))
    if why:
        out.print(Text.assemble(("suspect: ", "bold yellow"), why))
    if v.signature is not None:
        out.print(Text.assemble(("signature: ", "bold"), clean(v.signature.id)))
        where = f"line {v.line_no}: " if v.line_no else ""
        out.print(Text.assemble(("key line: ", "bold"), where,
                                first_chars(clean(v.signature.line), KEY_LINE_CAP)))
    if v.hint:
        out.print(Text.assemble(("hint: ", "bold"), v.hint))
    for k, val in v.details.items():
        out.print(Text.assemble((f"{k}: ", "bold"), first_chars(clean(val), DETAIL_CAP)))
    d = v.decode
    if d is not None:
        out.print(Text.assemble(("decode lines: ", "bold"), d.describe()))
    for n in v.notes:
        out.print(Text.assemble(("note: ", "dim"), clean(n)))
