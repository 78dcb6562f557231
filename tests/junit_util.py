"""JUnit XML checked the way CI servers read it: the Jenkins xUnit plugin's junit-10.xsd
(vendored in tests/data/junit, see SOURCE.md) and junitparser."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

XSD = Path(__file__).parent / "data" / "junit" / "junit-10.xsd"


@lru_cache(maxsize=1)
def _schema() -> Any:
    import pytest
    xmlschema = pytest.importorskip("xmlschema", reason="pip install -e '.[test]' (xmlschema "
                                    "validates JUnit XML against junit-10.xsd)")
    return xmlschema.XMLSchema(str(XSD))


def schema_errors(path: Path) -> list[str]:
    """Every reason junit-10.xsd rejects the file (empty: it validates)."""
    return [str(e.reason) + " at " + str(e.path) for e in _schema().iter_errors(str(path))]


def check_junit(path: Path) -> dict[str, int]:
    """Assert the file validates against junit-10.xsd and reads with junitparser; returns the
    totals junitparser sees (tests, failures, errors, skipped)."""
    errs = schema_errors(path)
    assert not errs, f"{path} does not validate against junit-10.xsd: {errs[:3]}"
    import shutil
    import subprocess
    if shutil.which("xmllint"):  # libxml2's validator, a second opinion (.ci/run installs it)
        r = subprocess.run(["xmllint", "--noout", "--schema", str(XSD), str(path)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    import pytest
    JUnitXml = pytest.importorskip("junitparser", reason="pip install -e '.[test]'").JUnitXml
    xml = JUnitXml.fromfile(str(path))
    suites = list(xml) if hasattr(xml, "__iter__") else [xml]
    out = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for s in suites:
        for case in s:
            out["tests"] += 1
            for r in case.result:
                kind = type(r).__name__.lower()
                if kind == "failure":
                    out["failures"] += 1
                elif kind == "error":
                    out["errors"] += 1
                elif kind == "skipped":
                    out["skipped"] += 1
    return out
