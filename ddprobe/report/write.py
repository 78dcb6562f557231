"""Write every report file of a run into its directory (after every sweep/bisect/smoke), each
rendered from the run's one model (ddprobe/runmodel.py)."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from ddprobe.errors import DdprobeError
from ddprobe.report.frame import render_csv
from ddprobe.report.html import render_html
from ddprobe.report.jsondoc import render_json
from ddprobe.report.markdown import render_markdown
from ddprobe.runmodel import RunModel

# format -> (file name in the run dir, renderer)
FORMATS: dict[str, tuple[str, Callable[[RunModel], str]]] = {
    "md": ("report.md", render_markdown),
    "json": ("report.json", render_json),
    "csv": ("cells.csv", render_csv),
    "html": ("report.html", render_html),
}


def render(m: RunModel, fmt: str) -> str:
    """The text of one report format (md, json, csv, html)."""
    if fmt not in FORMATS:
        raise DdprobeError(f"unknown report format {fmt!r} (one of: {', '.join(FORMATS)})")
    return FORMATS[fmt][1](m)


def write_text_atomic(path: Path, text: str) -> None:
    """Write then rename: a reader (or a second re-render) never sees half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_reports(m: RunModel, formats: tuple[str, ...] = tuple(FORMATS)) -> dict[str, Path]:
    """Write report.md, report.json, cells.csv and report.html into the run's directory.

    Returns {format: path}. Safe to call again at any time: each file is replaced atomically.
    """
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise DdprobeError(f"unknown report format(s) {', '.join(unknown)} (one of: "
                           f"{', '.join(FORMATS)})")
    out: dict[str, Path] = {}
    for fmt in formats:
        name, _ = FORMATS[fmt]
        path = m.run_dir / name
        try:
            write_text_atomic(path, render(m, fmt))
        except OSError as e:
            raise DdprobeError(f"cannot write {path}: {e.strerror or e}") from None
        out[fmt] = path
    return out


def write_run_reports(m: RunModel) -> RunModel:
    """The files of a finished bisect or sweep; a failure to write them becomes a run note
    (the run itself is done: its journal holds it) on the model returned."""
    from dataclasses import replace
    try:
        write_reports(m)
    except Exception as e:
        return replace(m, run_notes=(*m.run_notes, f"reports not written: {type(e).__name__}: {e}"))
    return m
