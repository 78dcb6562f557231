"""`smoke --junit` against the Jenkins schema (junit-10.xsd, vendored with its source) and
junitparser: every status, hostile host text, several hosts. The validator itself is checked
to reject what the issue found (a `skipped` attribute on <testsuites>) and to accept pytest's
own JUnit XML."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from junit_util import check_junit, schema_errors

from ddprobe.report.junit import junit_xml
from ddprobe.runmodel import SmokeCase
from ddprobe.smoke import HostSmoke, SmokeReport


def _report() -> SmokeReport:
    evil = "log \x1b[31m\x00\x07 <tag> & ]]> \ud7ff end"
    a = HostSmoke("b300", [SmokeCase("facts", "smoke.b300"),
                           SmokeCase("flags", "smoke.b300", "failure", "unknown flag", "refused"),
                           SmokeCase("cell b16", "smoke.b300.b16-graph", "error", evil, "crash",
                                     output=evil * 50),
                           SmokeCase("probes b16", "smoke.b300", "skipped", "no server")],
                  exit_code=8, properties={"sglang": "0.5.10", "gpu": evil}, time=1.5,
                  timestamp="2026-12-01T10:00:00")
    b = HostSmoke("rtx", [SmokeCase("facts", "smoke.rtx", "error", "unreachable", "unreachable")],
                  exit_code=4, time=0.1, timestamp="2026-12-01T10:00:00")
    return SmokeReport("r1", Path("runs/r1"), [a, b], 2.0)


def test_every_status_and_hostile_text_validate(tmp_path: Path) -> None:
    f = tmp_path / "smoke.xml"
    f.write_text(junit_xml(_report()), encoding="utf-8")
    seen = check_junit(f)
    assert seen == {"tests": 5, "failures": 1, "errors": 2, "skipped": 1}


def test_the_validator_rejects_what_jenkins_rejects(tmp_path: Path) -> None:
    bad = tmp_path / "bad.xml"
    bad.write_text('<?xml version="1.0"?><testsuites skipped="1"><testsuite tests="1">'
                   '<testcase name="x"/></testsuite></testsuites>')
    errs = schema_errors(bad)
    assert errs and "skipped" in errs[0]
    missing = tmp_path / "missing.xml"  # `tests` is required on a testsuite
    missing.write_text('<testsuites><testsuite name="s"><testcase name="x"/></testsuite>'
                       '</testsuites>')
    assert schema_errors(missing)


def test_pytests_own_junit_xml_validates(tmp_path: Path) -> None:
    t = tmp_path / "test_mini.py"
    t.write_text("import pytest\n\ndef test_a():\n    pass\n\ndef test_b():\n    assert 0\n\n"
                 "@pytest.mark.skip(reason='x')\ndef test_c():\n    pass\n")
    out = tmp_path / "pytest.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(t),
                    f"--junitxml={out}", "-o", "junit_family=xunit2"], cwd=tmp_path,
                   capture_output=True, timeout=120)
    assert check_junit(out) == {"tests": 3, "failures": 1, "errors": 0, "skipped": 1}
