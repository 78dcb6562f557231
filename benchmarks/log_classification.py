"""Benchmark: how well ddprobe reads real server logs (the corpus in tests/data/logs/).

    python benchmarks/log_classification.py [--cells] [--corpus DIR]

Classifies every excerpt with `ddprobe classify` (the library call) and, with --cells, also
replays each through a real `run` cell (tests/logreplay.py, the process exiting at once and
lingering with its HTTP front up). Prints the confusion table of outcomes (expected rows x got
columns), and the share of right class (outcome and signature kind) and right phase, split
into start-up (startup and capture) and serving, plus linger invariance and healthy logs
called failures. Targets: >= 95% right class and phase in each split, the same outcome at any
linger, no healthy log classified as a failure.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from ddprobe.cell.logverdict import classify_log  # noqa: E402
from ddprobe.signatures.corpus import CorpusLog, load_corpus  # noqa: E402

OUTCOMES = ("ok", "crash", "hang", "refused", "error", "garbage", "incomplete")


@dataclass(frozen=True)
class Got:
    outcome: str
    phase: str
    kind: str
    key: str = ""


def by_classify(c: CorpusLog) -> Got:
    v = classify_log(c.text)
    return Got(v.outcome, v.phase, v.signature.kind if v.signature else "",
               v.signature.id if v.signature else "")


def by_cell(c: CorpusLog, linger: float, work: Path) -> Got:
    from corpus_replay import run_replay
    cell = run_replay(c, work, linger=linger)
    phase = str(cell.extra.get("phase") or ("serving" if cell.outcome.value == "ok" else "?"))
    sig = cell.signature
    if cell.outcome.value == "error" and sig is None:
        # an infrastructure cell carries no signature by design (never blamed on the server):
        # its class is the outcome and the catalogue entry that said so
        logged = str(cell.extra.get("log_signature") or "")
        return Got("error", phase, logged.split(":", 1)[0], logged)
    return Got(cell.outcome.value, phase, sig.kind if sig and cell.outcome.value != "ok" else "",
               sig.id if sig else "")


def report(title: str, rows: list[tuple[CorpusLog, Got]]) -> None:
    print(f"\n== {title}: {len(rows)} runs")
    cols = [o for o in OUTCOMES if any(g.outcome == o for _, g in rows)
            or any(c.outcome == o for c, _ in rows)]
    width = max(len(o) for o in cols) + 2
    print("expected \\ got".ljust(16) + "".join(o.rjust(width) for o in cols))
    table = Counter((c.outcome, g.outcome) for c, g in rows)
    for exp in cols:
        if not any(c.outcome == exp for c, _ in rows):
            continue
        print(exp.ljust(16) + "".join(str(table[(exp, o)] or ".").rjust(width) for o in cols))
    for split, phases in (("start-up", ("startup", "capture")), ("serving", ("serving",))):
        part = [(c, g) for c, g in rows if c.phase in phases]
        if not part:
            continue
        cls = sum(g.outcome == c.outcome and g.kind == c.kind for c, g in part)
        ph = sum(g.phase == c.phase for c, g in part)
        print(f"{split:9s} right class {cls}/{len(part)} ({100 * cls / len(part):.1f}%)   "
              f"right phase {ph}/{len(part)} ({100 * ph / len(part):.1f}%)")
    healthy_bad = [c.name for c, g in rows if c.outcome == "ok" and g.outcome != "ok"]
    print(f"healthy logs called failures: {len(healthy_bad)}"
          + (f" ({', '.join(healthy_bad)})" if healthy_bad else ""))
    wrong = [(c, g) for c, g in rows if (g.outcome, g.kind, g.phase) != (c.outcome, c.kind,
                                                                         c.phase)]
    for c, g in wrong:
        print(f"  wrong: {c.name}: expected {c.outcome}/{c.kind or '-'}/{c.phase}, got "
              f"{g.outcome}/{g.kind or '-'}/{g.phase} {g.key[:100]}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=ROOT / "tests" / "data" / "logs")
    ap.add_argument("--cells", action="store_true",
                    help="also replay every excerpt through real run cells (minutes)")
    args = ap.parse_args(argv)
    corpus = load_corpus(args.corpus)
    print(f"corpus: {len(corpus)} real excerpts from "
          f"{len({c.url.split('/')[4] for c in corpus})} repositories")
    report("ddprobe classify", [(c, by_classify(c)) for c in corpus])
    if args.cells:
        from corpus_replay import lingers
        rows, invariant, pairs = [], 0, 0
        with tempfile.TemporaryDirectory(prefix="ddprobe-bench-logs-") as tmp:
            for i, c in enumerate(corpus):
                got = [by_cell(c, lg, Path(tmp) / f"w{i}-{lg:g}") for lg in lingers(c)]
                rows += [(c, g) for g in got]
                if len(got) > 1:
                    pairs += 1
                    invariant += len({(g.outcome, g.key) for g in got}) == 1
                print(".", end="", flush=True, file=sys.stderr)
        print(file=sys.stderr)
        report("run cells (the process exiting at once and lingering)", rows)
        print(f"same outcome and signature at every linger: {invariant}/{pairs} logs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
