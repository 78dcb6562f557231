"""Feed every parser of untrusted text generated and mutated inputs: 0 uncaught exceptions.

    python benchmarks/fuzz_parsers.py                  # 100,000 inputs per parser
    python benchmarks/fuzz_parsers.py --count 2000 --only patch,journal

The parsers, their documented errors, their seed corpora (the log corpus, the shipped patches,
the example inventories and playbooks, the old journal, each host program's real answer on
this machine) and the mutations are tests/fuzz_util.py's (tests/test_fuzz_parsers.py drives
the same mutations with hypothesis). One input in ten is plain random text, the others a seed
changed by one to six mutations (characters, spans, lines swapped, dropped or duplicated, lines
of another seed spliced in, numbers made huge, JSON values of another type, indentation).
Deterministic for a --seed. Prints per parser: inputs, uncaught exceptions, documented errors,
inputs over the per-input time limit, seconds; the first input of each distinct uncaught
exception (type and where it was raised) is shown. Exit 1 when anything escaped.
"""
from __future__ import annotations

import argparse
import random
import signal
import sys
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import fuzz_util  # noqa: E402
from fuzz_util import Op, Target  # noqa: E402


class _Slow(BaseException):
    """An input over the time limit (raised by the alarm; never caught by a parser)."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Slow()


@dataclass
class Tally:
    inputs: int = 0
    uncaught: int = 0
    documented: int = 0
    slow: int = 0
    seconds: float = 0.0
    escapes: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)


def _random_text(rnd: random.Random, words: list[str]) -> str:
    parts = []
    for _ in range(rnd.randint(0, 30)):
        if rnd.random() < 0.5:
            parts.append(rnd.choice(words))
        else:
            parts.append("".join(chr(rnd.choice((rnd.randint(0, 127), rnd.randint(0, 0x2fff))))
                                 for _ in range(rnd.randint(0, 8))))
        parts.append(rnd.choice(("", " ", "\n", ": ", "\n  ", "\t")))
    return "".join(parts)


def _input(rnd: random.Random, seeds: list[str], words: list[str]) -> str:
    if rnd.random() < 0.1:
        return _random_text(rnd, words)
    seed = rnd.choice(seeds)
    ops = [Op(rnd.randrange(fuzz_util.N_KINDS), rnd.getrandbits(20), rnd.getrandbits(20),
              rnd.choice(words) if rnd.random() < 0.8 else _random_text(rnd, words)[:12])
           for _ in range(rnd.randint(1, 6))]
    text: str = fuzz_util.mutate(seed, ops, seeds)
    return text


def _where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    inside = [f for f in tb if "/ddprobe/" in f.filename] or tb
    f = inside[-1]
    return f"{type(e).__name__} at {Path(f.filename).name}:{f.lineno} ({f.name})"


def run_target(t: Target, count: int, seed: int, limit_s: float) -> Tally:
    rnd = random.Random(f"{seed}:{t.name}")
    seeds = t.seeds()
    words = fuzz_util.dictionary(seeds)
    tally = Tally()
    t0 = time.perf_counter()
    for _ in range(count):
        text = _input(rnd, seeds, words)
        tally.inputs += 1
        signal.setitimer(signal.ITIMER_REAL, limit_s)
        try:
            if fuzz_util.outcome(t, text) == "documented":
                tally.documented += 1
        except _Slow:
            tally.slow += 1
            tally.examples.setdefault("slow", text[:2000])
        except Exception as e:  # what escaped is the measurement
            tally.uncaught += 1
            key = _where(e)
            tally.escapes[key] += 1
            tally.examples.setdefault(key, text[:2000])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    tally.seconds = time.perf_counter() - t0
    return tally


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100_000, help="inputs per parser")
    ap.add_argument("--only", default="", help="comma-separated parser names")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=float, default=5.0, help="seconds one input may take")
    ap.add_argument("--show", type=int, default=400, help="characters of each example shown")
    a = ap.parse_args()
    names = [n for n in a.only.split(",") if n] or [t.name for t in fuzz_util.TARGETS]
    unknown = [n for n in names if n not in fuzz_util.BY_NAME]
    if unknown:
        ap.error(f"unknown parser(s) {', '.join(unknown)} (known: "
                 f"{', '.join(fuzz_util.BY_NAME)})")
    signal.signal(signal.SIGALRM, _alarm)
    warnings.simplefilter("ignore")  # a regex's FutureWarning, a SyntaxWarning: no exception
    print(f"{'parser':<18} {'inputs':>8} {'uncaught':>8} {'documented':>10} {'slow':>5} "
          f"{'seconds':>8}  function")
    total_uncaught = total_slow = 0
    for name in names:
        t = fuzz_util.BY_NAME[name]
        tally = run_target(t, a.count, a.seed, a.limit)
        total_uncaught += tally.uncaught
        total_slow += tally.slow
        print(f"{name:<18} {tally.inputs:>8} {tally.uncaught:>8} {tally.documented:>10} "
              f"{tally.slow:>5} {tally.seconds:>8.1f}  {t.what}", flush=True)
        for key, n in tally.escapes.most_common():
            print(f"    {n} x {key}: {tally.examples[key][:a.show]!r}")
        if tally.slow:
            print(f"    {tally.slow} over {a.limit} s: {tally.examples['slow'][:a.show]!r}")
    print(f"total: {total_uncaught} uncaught, {total_slow} over the time limit")
    return 1 if total_uncaught or total_slow else 0


if __name__ == "__main__":
    sys.exit(main())
