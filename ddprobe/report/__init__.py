"""Render runs: terminal (rich), markdown, JSON, CSV (pandas, one row per cell), HTML (SVG),
every one from the run's one model (ddprobe/runmodel.py).

    from ddprobe.report import load_model, render_terminal, write_reports
    m = load_model(run_dir)       # or what run_bisect / run_sweep returned
    paths = write_reports(m)      # report.md, report.json, cells.csv, report.html
    render_terminal(m, console)
"""
from __future__ import annotations

from ddprobe.report.frame import cells_frame, render_csv
from ddprobe.report.html import render_html
from ddprobe.report.jsondoc import render_json, report_dict
from ddprobe.report.markdown import render_markdown
from ddprobe.report.resolve import resolve_run
from ddprobe.report.terminal import render_terminal
from ddprobe.report.write import FORMATS, render, write_reports
from ddprobe.runmodel import RunModel, build_model, load_model

__all__ = ["FORMATS", "RunModel", "build_model", "cells_frame", "load_model", "render",
           "render_csv", "render_html", "render_json", "render_markdown", "render_terminal",
           "report_dict", "resolve_run", "write_reports"]
