"""Benchmark: ddprobe's start-up, side by side with `python -c pass` (issue 24.16).

    python benchmarks/startup.py [--runs N]

Runs each command N times (default 7) through the installed `ddprobe` script and prints the
median and the best wall time of each, next to the interpreter's own start-up. Targets on a
2-core machine: `ddprobe --version` under 0.3 s, a TAB completion (bash's protocol, as the
installed completion script calls it) under 0.5 s. Also prints which heavy modules (pandas,
paramiko, httpx) each command imported: none of them for these.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS = {"ddprobe --version": 0.3, "complete `ddprobe bisect --host te`": 0.5,
           "complete `ddprobe facts --host te`": 0.5}
HEAVY = ("pandas", "paramiko", "httpx")


def _ddprobe() -> list[str]:
    exe = shutil.which("ddprobe") or str(Path(sys.executable).with_name("ddprobe"))
    return [exe]


def _complete(words: str) -> dict[str, str]:
    n = len(words.split()) - (0 if words.endswith(" ") else 1)
    return {"_DDPROBE_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(n)}


def _cases(tmp: Path) -> list[tuple[str, list[str], dict[str, str]]]:
    inv = tmp / "hosts.yaml"
    inv.write_text("hosts:\n  test-1: {}\n  test-2: {}\n")
    base = {"DDPROBE_INVENTORY": str(inv)}
    return [
        ("python -c pass", [sys.executable, "-c", "pass"], {}),
        ("ddprobe --version", [*_ddprobe(), "--version"], {}),
        ("complete `ddprobe bisect --host te`", _ddprobe(),
         {**base, **_complete("ddprobe bisect --host te")}),
        ("complete `ddprobe facts --host te`", _ddprobe(),
         {**base, **_complete("ddprobe facts --host te")}),
        ("complete `ddprobe bis` (every command)", _ddprobe(),
         {**base, **_complete("ddprobe bis")}),
        ("ddprobe --help", [*_ddprobe(), "--help"], {}),
    ]


def _time(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False, timeout=120)
        out.append(time.perf_counter() - t0)
    return out


def _heavy(argv: list[str], env: dict[str, str]) -> list[str]:
    """The heavy modules `argv` imports (python -X importtime on the same command)."""
    if argv[0] == sys.executable:
        return []
    cmd = [sys.executable, "-X", "importtime", "-m", "ddprobe", *argv[1:]]
    res = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True,
                         check=False, timeout=120)
    names = {ln.rsplit("|", 1)[-1].strip() for ln in res.stderr.splitlines() if "|" in ln}
    return [m for m in HEAVY if m in names]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cases = _cases(Path(d))
        rows = []
        for name, argv, env in cases:
            ts = _time(argv, env, a.runs)
            rows.append((name, statistics.median(ts), min(ts), _heavy(argv, env)))
    base = rows[0][1]
    print(f"start-up, {a.runs} runs each (median / best, seconds; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    for name, med, best, heavy in rows:
        target = TARGETS.get(name)
        verdict = "" if target is None else (f"  target < {target} s: "
                                              + ("ok" if med < target else "MISSED"))
        print(f"  {name:42s} {med:6.3f} / {best:6.3f}  (+{med - base:5.3f} over python)"
              f"  heavy imports: {', '.join(heavy) or 'none'}{verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
