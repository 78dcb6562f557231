"""The structure targets of the tool (ddprobe/, not the testbed), checked by .ci/gate.

- at most MAX_COMPLEX functions rated D or worse by radon (cyclomatic complexity > 20);
- no module over MAX_LINES lines;
- every module named like a host program (`*host*`) lives in ddprobe/hostside/;
- no unresolved file reference: every .md named in code, comments, tests and docs is in the
  repository (the check of tests/test_doc_references.py);
- no package cycle and no module cycle (tests/imports_util.py: the strongly connected
  components of the import graph of ddprobe's packages, its sub-packages and top-level
  modules, counting every import, those under TYPE_CHECKING too; module cycles: those among
  the modules of one package);
- 0 `mypy --strict` errors outside ddprobe/hostside/: mypy run with `--strict` and the project's
  config (whose host-program overrides relax only modules of ddprobe.hostside), counting the
  error lines of files under ddprobe/ but ddprobe/hostside/; an override in pyproject.toml that
  names another ddprobe module breaks the target too (it could hide errors from the count).
Prints the figures; exits 1 naming what breaks a target.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from radon.complexity import cc_rank, cc_visit

MAX_COMPLEX = 0
MAX_LINES = 600
ROOT = Path(__file__).resolve().parents[1] / "ddprobe"
sys.path.insert(0, str(ROOT.parent / "tests"))
from imports_util import cycles, module_graph, package_graph, package_of  # noqa: E402
from test_doc_references import _sources, unresolved  # noqa: E402


def strict_errors() -> list[str]:
    """The `mypy --strict` error lines of ddprobe/ outside ddprobe/hostside/ (the config's
    `packages`, run from the repository root so that the paths are relative)."""
    from mypy import api

    os.chdir(ROOT.parent)
    out, _, _ = api.run(["--strict"])
    return [ln for ln in out.splitlines() if ": error:" in ln and ln.startswith("ddprobe/")
            and not ln.startswith("ddprobe/hostside/")]


def relaxed_modules() -> list[str]:
    """The ddprobe modules outside hostside that a mypy override of pyproject.toml names."""
    import tomllib  # Python 3.11+

    cfg = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))
    out = []
    for o in cfg["tool"]["mypy"].get("overrides", []):
        mods = [o["module"]] if isinstance(o["module"], str) else o["module"]
        out += [m for m in mods if (m == "ddprobe" or m.startswith("ddprobe."))
                and not m.startswith("ddprobe.hostside.")]
    return out


def module_cycles() -> list[list[str]]:
    """Cycles among the modules of one package (the edges between packages left out)."""
    graph = module_graph()
    return cycles({m: {d for d in deps if package_of(d) == package_of(m)}
                   for m, deps in graph.items()})


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
    strict, relaxed = strict_errors(), relaxed_modules()
    print(f"health: {len(complex_)} functions D or worse (at most {MAX_COMPLEX}); "
          f"{len(long_)} modules over {MAX_LINES} lines; {len(misplaced)} *host* modules "
          f"outside ddprobe/hostside/; {len(refs)} unresolved file references (at most 0)")
    print(f"health: mypy --strict errors outside hostside {len(strict)} (at most 0)")
    pkg_cycles, mod_cycles = cycles(package_graph()), module_cycles()
    print(f"health: package cycles {len(pkg_cycles)} (at most 0); "
          f"module cycles {len(mod_cycles)} (at most 0)")
    for line in complex_:
        print(f"  complex: {line}")
    bad = [f"  too long: {x}" for x in long_] + [f"  misplaced: {x}" for x in misplaced]
    bad += [f"  unresolved reference: {x}" for x in refs]
    bad += [f"  mypy --strict: {x}" for x in strict]
    bad += [f"  package cycle: {' <-> '.join(c)}" for c in pkg_cycles]
    bad += [f"  module cycle: {' <-> '.join(c)}" for c in mod_cycles]
    bad += [f"  mypy override relaxes {m} (only ddprobe.hostside modules may be relaxed)"
            for m in relaxed]
    if len(complex_) > MAX_COMPLEX:
        bad.insert(0, f"  {len(complex_)} functions D or worse, more than {MAX_COMPLEX}")
    if bad:
        print("\n".join(bad), file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
