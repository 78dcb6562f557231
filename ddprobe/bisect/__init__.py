"""Bisect and sweep: plan cells from the outcomes so far, run them over hosts, write verdicts.

Pure logic: cells, frontier, ladder, planner, static, verdicts, synthetic, plantext, compare.
I/O: executor, session, engine, run (bisect), sweep, sessionlog (reads the journal).
"""
from __future__ import annotations
