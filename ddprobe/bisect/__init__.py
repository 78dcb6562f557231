"""Bisect and sweep: plan cells from the outcomes so far, run them over hosts, write verdicts.

Pure logic: cells, frontier, ladder, planner, static, verdicts, synthetic, plantext, compare.
I/O: session (the hosts of a run), cellrun (one cell on a session), engine (rounds),
runframe (what bisect and sweep share), run (bisect), sweep, sessionlog (reads the journal).
"""
from __future__ import annotations
