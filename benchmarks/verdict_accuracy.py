"""Verdict accuracy: the bisect over every bundled testbed scenario, graded against the
ground truth written in each scenario's header (`# expect: FLAGS => BUDGET:KIND ...`).

    python benchmarks/verdict_accuracy.py [SCENARIO ...] [--tasks N]

Runs `ddprobe bisect` on the built-in (local) testbed host for each expectation, then prints
side by side per scenario: right / wrong / inconclusive budgets (and how many were assumed, not
restarted), the confidence of each wrong one, and the restarts used vs the full sweep
(budgets x {graph, eager}) vs the minimum an oracle that knows the truth needs under ddprobe's
evidence rules, the graph-vs-eager comparisons included (`ddtestbed.expect.minimum_restarts`
says how it is derived). The last lines are the totals, the budgets called ok whose graph
output differs from eager (the stale scalar's truth), the graph_capture verdicts on a
nondeterministic server and the runs over 1.2x their minimum. Every figure is measured in this
one run.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ddprobe.bisect.run import BisectRequest, run_bisect  # noqa: E402
from ddprobe.cli.bisect import request_of  # noqa: E402
from ddprobe.inventory import Host, builtin_testbed  # noqa: E402
from ddprobe.remote import RemoteOptions  # noqa: E402
from ddprobe.results import Verdict  # noqa: E402
from ddtestbed.expect import (  # noqa: E402
    Expectation,
    Graded,
    expectations,
    grade,
    minimum_restarts,
)
from ddtestbed.scenario import load_scenario  # noqa: E402


def corrupt_ok(exp: Expectation, verdicts: list[Verdict]) -> int:
    """Budgets called ok whose graph output differs from eager (the stale scalar's truth)."""
    st = load_scenario(exp.scenario).defects.stale_scalar.min_draft_tokens
    return sum(1 for v in verdicts if v.kind == "ok" for b in v.budgets
               if st is not None and b + 1 >= st)


def nondet_capture(exp: Expectation, verdicts: list[Verdict]) -> int:
    """Budgets called graph_capture on a server whose greedy output is nondeterministic."""
    if not load_scenario(exp.scenario).defects.nondeterministic.every:
        return 0
    return sum(len(v.budgets) for v in verdicts if v.kind == "graph_capture")


def request(exp: Expectation, tasks: str) -> BisectRequest:
    """The header's flags as `ddprobe bisect` reads them (ddprobe.cli.bisect.request_of); the
    header's own --tasks, where it gives one, over the benchmark's."""
    req = request_of(exp.flags)
    return replace(req, budgets=exp.budgets,
                   tasks=req.tasks if "--tasks" in exp.flags else (tasks,))


def testbed_host(scenario: str) -> Host:
    os.environ["DDTESTBED_SCENARIO"] = scenario
    h = builtin_testbed()
    # a hang is declared after the health timeout: 10 s is ample for a 0.7 s simulated start
    # the scenario's own max bs is its production one, not the built-in host's 64
    return replace(h, server=replace(h.server, health_timeout=10.0, max_bs=None))


def run_one(exp: Expectation, root: Path, tasks: str) -> tuple[list[Graded], object]:
    host = testbed_host(exp.scenario)
    rep = run_bisect([host], request(exp, tasks), root=root, break_lock=True,
                     opts=RemoteOptions())
    return grade(exp, list(rep.verdicts)), rep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*")
    ap.add_argument("--tasks", default="2", help="coding tasks per probe (default 2)")
    args = ap.parse_args(argv)
    exps = expectations(args.scenarios or None)
    root = Path(tempfile.mkdtemp(prefix="ddprobe-accuracy-"))
    head = (f"{'scenario':38} {'right':>5} {'wrong':>5} {'inconcl':>7} {'assumed':>7} "
            f"{'restarts':>8} {'sweep':>5} {'min':>4} {'ratio':>5}  wrong (confidence)")
    print(head)
    print("-" * len(head))
    tot = {"right": 0, "wrong": 0, "inconclusive": 0, "assumed": 0, "used": 0, "sweep": 0,
           "min": 0, "corrupt_ok": 0, "nondet_gc": 0, "over": 0}
    t0 = time.monotonic()
    for exp in exps:
        graded, rep = run_one(exp, root, args.tasks)
        n = {g: sum(1 for x in graded if x.grade == g) for g in ("right", "wrong",
                                                                 "inconclusive")}
        assumed = sum(1 for x in graded if not x.tested)
        used, sweep = rep.restarts_used, rep.restarts_full_sweep  # type: ignore[attr-defined]
        mn = minimum_restarts(exp)
        wrong = ", ".join(f"b{x.budget}: {x.kind} ({x.confidence}) not "
                          f"{x.expected.text}" for x in graded if x.grade == "wrong")
        inc = ", ".join(f"b{x.budget}" for x in graded if x.grade == "inconclusive")
        note = wrong + (f"  [inconclusive: {inc}]" if inc else "")
        print(f"{exp.label[:38]:38} {n['right']:>5} {n['wrong']:>5} {n['inconclusive']:>7} "
              f"{assumed:>7} {used:>8} {sweep:>5} {mn:>4} "
              f"{(used / mn if mn else 1.0):>5.2f}  {note}")
        for k in ("right", "wrong", "inconclusive"):
            tot[k] += n[k]
        tot["assumed"] += assumed
        tot["used"] += used
        tot["sweep"] += sweep
        tot["min"] += mn
        tot["corrupt_ok"] += corrupt_ok(exp, rep.verdicts)  # type: ignore[attr-defined]
        tot["nondet_gc"] += nondet_capture(exp, rep.verdicts)  # type: ignore[attr-defined]
        tot["over"] += int(mn > 0 and used > 1.2 * mn)
    print("-" * len(head))
    print(f"{'total (' + str(len(exps)) + ' runs)':38} {tot['right']:>5} {tot['wrong']:>5} "
          f"{tot['inconclusive']:>7} {tot['assumed']:>7} {tot['used']:>8} {tot['sweep']:>5} "
          f"{tot['min']:>4} {tot['used'] / max(1, tot['min']):>5.2f}")
    print(f"budgets called ok whose graph output differs from eager: {tot['corrupt_ok']}; "
          f"graph_capture verdicts on nondeterminism: {tot['nondet_gc']}; runs over 1.2x "
          f"the minimum: {tot['over']}")
    print(f"wall {time.monotonic() - t0:.0f} s; runs under {root}")
    return 0 if tot["wrong"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
