"""Write every report file of a run into its directory (the end of every sweep/bisect/smoke)."""
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
from ddprobe.report.model import ReportModel, build_model
from ddprobe.store import RunRecord

# format -> (file name in the run dir, renderer)
FORMATS: dict[str, tuple[str, Callable[[RunRecord, ReportModel], str]]] = {
    "md": ("report.md", render_markdown),
    "json": ("report.json", render_json),
    "csv": ("cells.csv", lambda rec, _m: render_csv(rec)),
    "html": ("report.html", render_html),
}


def render(rec: RunRecord, fmt: str, model: ReportModel | None = None) -> str:
    """The text of one report format (md, json, csv, html)."""
    if fmt not in FORMATS:
        raise DdprobeError(f"unknown report format {fmt!r} (one of: {', '.join(FORMATS)})")
    return FORMATS[fmt][1](rec, model or build_model(rec))


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


def write_reports(rec: RunRecord, formats: tuple[str, ...] = tuple(FORMATS)) -> dict[str, Path]:
    """Write report.md, report.json, cells.csv and report.html into `rec.dir`.

    Returns {format: path}. Safe to call again at any time: each file is replaced atomically.
    """
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise DdprobeError(f"unknown report format(s) {', '.join(unknown)} (one of: "
                           f"{', '.join(FORMATS)})")
    model = build_model(rec)
    out: dict[str, Path] = {}
    for fmt in formats:
        name, _ = FORMATS[fmt]
        path = rec.dir / name
        try:
            write_text_atomic(path, render(rec, fmt, model))
        except OSError as e:
            raise DdprobeError(f"cannot write {path}: {e.strerror or e}") from None
        out[fmt] = path
    return out
