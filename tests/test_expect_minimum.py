"""The restart minimum derived from a scenario's truth (ddtestbed/expect.py), on two headers.

Expected, worked out by hand from the docstring's rules before the code changed:
  * stale-capture (8 ok; 16 a silent divergence; 32, 64 capture garbage): two runs of
    graph_capture, one per defect. Frontier 4 (b16 and b32, each a run's first; b8 the last
    pass; b64, failing inside a run, where the search starts), b8's comparison 1, b16's
    diagnosis 2 + its eager repeat 1, b32's 2, b64's own control 1: 11.
  * late (8, 16 assumed; 32 ok; 64 buffer sizing): frontier 3 (the information bound), b32's
    comparison 1, the oversize 1, the cured cell's eager comparison 1: 6.
"""
from __future__ import annotations

from ddtestbed.expect import expectations, minimum_restarts


def test_two_defects_of_one_kind_are_two_runs_and_the_top_is_restarted() -> None:
    (exp,) = expectations(["stale-capture"])
    assert minimum_restarts(exp) == 11


def test_one_run_at_the_top_counts_the_top_once() -> None:
    (exp,) = expectations(["late"])
    assert minimum_restarts(exp) == 6
