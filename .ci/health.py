"""The structure targets of the tool (ddprobe/, not the testbed), checked by .ci/gate.

- at most MAX_COMPLEX functions rated D or worse by radon (cyclomatic complexity > 20);
- no module over MAX_LINES lines;
- every module named like a host program (`*host*`) lives in ddprobe/hostside/;
- no unresolved file reference: every .md named in code, comments, tests and docs is in the
  repository (the check of tests/test_doc_references.py).
Prints the figures; exits 1 naming what breaks a target.
"""
from __future__ import annotations

import sys
from pathlib import Path

from radon.complexity import cc_rank, cc_visit

MAX_COMPLEX = 15
MAX_LINES = 600
ROOT = Path(__file__).resolve().parents[1] / "ddprobe"
sys.path.insert(0, str(ROOT.parent / "tests"))
from test_doc_references import _sources, unresolved  # noqa: E402


def main() -> int:
    complex_: list[str] = []
    long_: list[str] = []
    misplaced: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).as_posix()
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n") + (not text.endswith("\n") and bool(text))
        if lines > MAX_LINES:
            long_.append(f"{rel} ({lines} lines)")
        if "host" in path.stem and "hostside" not in path.parts:
            misplaced.append(rel)
        for block in cc_visit(text):
            if cc_rank(block.complexity) in "DEF":
                complex_.append(f"{rel}:{block.lineno} {block.fullname} "
                                f"{cc_rank(block.complexity)} ({block.complexity})")
    refs = unresolved(_sources())
    print(f"health: {len(complex_)} functions D or worse (at most {MAX_COMPLEX}); "
          f"{len(long_)} modules over {MAX_LINES} lines; {len(misplaced)} *host* modules "
          f"outside ddprobe/hostside/; {len(refs)} unresolved file references (at most 0)")
    for line in complex_:
        print(f"  complex: {line}")
    bad = [f"  too long: {x}" for x in long_] + [f"  misplaced: {x}" for x in misplaced]
    bad += [f"  unresolved reference: {x}" for x in refs]
    if len(complex_) > MAX_COMPLEX:
        bad.insert(0, f"  {len(complex_)} functions D or worse, more than {MAX_COMPLEX}")
    if bad:
        print("\n".join(bad), file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
