"""Render runs: terminal (rich), markdown, JSON, CSV (pandas, one row per cell), HTML (SVG).

    from ddprobe.report import write_reports, render_terminal
    paths = write_reports(load_run(run_dir))   # report.md, report.json, cells.csv, report.html
    render_terminal(rec, console)
"""
from __future__ import annotations

from ddprobe.report.frame import cells_frame, render_csv
from ddprobe.report.html import render_html
from ddprobe.report.jsondoc import render_json, report_dict
from ddprobe.report.markdown import render_markdown
from ddprobe.report.model import ReportModel, build_model
from ddprobe.report.resolve import resolve_run
from ddprobe.report.terminal import render_terminal
from ddprobe.report.write import FORMATS, render, write_reports

__all__ = ["FORMATS", "ReportModel", "build_model", "cells_frame", "render", "render_csv",
           "render_html", "render_json", "render_markdown", "render_terminal", "report_dict",
           "resolve_run", "write_reports"]
