"""Patches in a terminal (`ddprobe patch`): a diff, the backups of patched files."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


def render_backups(backups: Sequence[dict[str, Any]], out: Console) -> None:
    """`patch status`/`recover`: each patched file's state against its backup."""
    t = Table(show_header=True, box=None, pad_edge=False)
    for c in ("patch", "file", "now", "backup"):
        t.add_column(c, overflow="fold")
    for b in backups:
        t.add_row(Text(b["patch"]), Text(b["path"]), Text(b["state"]), Text(b["backup"]))
    out.print(t)
    if backups:
        out.print(Text("`ddprobe patch recover --host H --apply` restores the files "
                       "that differ from their oldest backup", style="yellow"))


def render_diff(diff: str, out: Console) -> None:
    """A unified diff, coloured by line."""
    for line in diff.splitlines():
        style = "green" if line.startswith("+") and not line.startswith("+++") else (
            "red" if line.startswith("-") and not line.startswith("---") else (
                "cyan" if line.startswith("@@") else ""))
        out.print(Text(line, style=style))
