"""`ddprobe smoke`: exit codes per outcome and a well-formed JUnit report, over real SSH."""
from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from bisect_util import ENV, TASKS
from junit_util import check_junit
from server_util import inventory_text
from testbed_util import free_port, install_prefix

from ddprobe.cli import main
from ddprobe.exitcodes import ExitCode
from ddprobe.smoke import worst

pytestmark = pytest.mark.ssh


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_prefix(tmp_path_factory.mktemp("smoke") / "site")


def smoke(tmp: Path, sshd: object, prefix: Path, *args: str, scenario: str = "seed",
          edit: tuple[str, str] | None = None) -> tuple[int, ET.Element]:
    """Run `ddprobe smoke` against a fresh inventory entry; stop the server it leaves up (a
    smoke check keeps the production config running, a test must not)."""
    text = inventory_text(sshd.alias, prefix, free_port(), tmp / "work",  # type: ignore[attr-defined]
                          scenario=scenario, env=ENV)
    if edit:
        assert edit[0] in text
        text = text.replace(*edit)
    inv = tmp / "hosts.yaml"
    inv.write_text(text)
    junit = tmp / "junit" / "smoke.xml"
    base = ["-i", str(inv), "--ssh-config", str(sshd.ssh_config)]  # type: ignore[attr-defined]
    try:
        code = main([*base, "smoke", "--host", "gpu", "--tasks", TASKS, "--junit", str(junit),
                     "--json", *args])
    finally:
        main([*base, "server", "stop", "-H", "gpu"])
    root = ET.parse(junit).getroot()
    seen = check_junit(junit)  # junit-10.xsd and junitparser, on every smoke report here
    assert seen["tests"] == int(root.get("tests", -1))
    assert seen["failures"] == int(root.get("failures", -1))
    assert seen["errors"] == int(root.get("errors", -1))
    return code, root


def cases(root: ET.Element) -> dict[str, str]:
    """test case name -> pass | failure:<type> | error:<type> | skipped"""
    out = {}
    for tc in root.iter("testcase"):
        st = "pass"
        for tag in ("failure", "error"):
            el = tc.find(tag)
            if el is not None:
                st = f"{tag}:{el.get('type')}"
        if tc.find("skipped") is not None:
            st = "skipped"
        out[tc.get("name")] = st
    return out


def test_ok_at_the_production_budget(sshd: object, prefix: Path, tmp_path: Path, runs: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, root = smoke(tmp_path, sshd, prefix)
    doc = json.loads(capsys.readouterr().out.split("\n}\n")[0] + "\n}")
    assert code == 0 and doc["exit_code"] == 0
    assert cases(root) == {"facts": "pass", "flags b8": "pass", "cell b8": "pass",
                           "probes b8": "pass", "differential b8": "pass"}
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "gpu" and suite.get("tests") == "5"
    diff = next(tc for tc in root.iter("testcase") if tc.get("name") == "differential b8")
    out = diff.findtext("system-out") or ""
    assert "greedy answers identical" in out
    # a pass names the graphs its comparison did not replay (the probe's batches are small)
    assert re.search(r"at most \d+ requests in flight: the graphs captured for batches of "
                     r"more than \d+ \(up to 64\) were not replayed", out), out
    assert [c["config"]["graph"] for c in doc["hosts"][0]["cells"]] == [True, False]
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["ddtestbed.version"] and props["python"]
    cell = next(tc for tc in root.iter("testcase") if tc.get("name") == "cell b8")
    assert cell.get("classname") == "ddprobe.gpu.b8-graph-bs64"
    assert "Capture cuda graph" in (cell.findtext("system-out") or "")
    assert (runs / doc["run_id"] / "journal.jsonl").is_file()


def test_crash_garbage_exit_8_and_9(sshd: object, prefix: Path, tmp_path: Path, runs: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, root = smoke(tmp_path, sshd, prefix, "--budgets", "16")
    assert code == int(ExitCode.CRASH)
    c = cases(root)
    assert c["cell b16"] == "failure:crash" and c["probes b16"] == "skipped"
    assert c["differential b16"] == "skipped"  # no output to compare
    code, root = smoke(tmp_path, sshd, prefix, "--budgets", "8,32")
    assert code == int(ExitCode.GARBAGE)
    c = cases(root)
    assert c["probes b8"] == "pass" and c["probes b32"] == "failure:garbage"
    assert root.get("failures") == "1"


def test_hang_is_an_error_exit_11(sshd: object, prefix: Path, tmp_path: Path, runs: Path
                                  ) -> None:
    code, root = smoke(tmp_path, sshd, prefix, scenario="hang",
                          edit=("health_timeout: 30", "health_timeout: 3"))
    assert code == int(ExitCode.HANG)
    assert cases(root)["cell b8"] == "error:hang"


def test_refused_flags_exit_7(sshd: object, prefix: Path, tmp_path: Path, runs: Path) -> None:
    code, root = smoke(tmp_path, sshd, prefix, edit=(
        "args: ['--testbed-scenario', 'seed']",
        "args: ['--testbed-scenario', 'seed', '--speculative-bogus', '1']"))
    assert code == int(ExitCode.REFUSED)
    c = cases(root)
    assert c["flags b8"] == "failure:refused" and c["cell b8"] == "skipped"


def test_degraded_against_a_baseline_exit_10(sshd: object, prefix: Path, tmp_path: Path,
                                             runs: Path) -> None:
    base = tmp_path / "baseline.json"
    base.write_text(json.dumps({"host": "gpu", "config": {"budget": 8}, "outcome": "ok",
                                "probes": {"passed": 3, "total": 3, "tok_s": 1e9}}))
    code, root = smoke(tmp_path, sshd, prefix, "--baseline", str(base))
    assert code == int(ExitCode.DEGRADED)
    assert cases(root)["probes b8"] == "failure:degraded"


def test_unreachable_exit_4_and_junit_error(tmp_path: Path, runs: Path, sshd: object) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  gone:\n    host: 127.0.0.1\n    port: {free_port()}\n"
                   f"    python: {sys.executable}\n    server:\n      budget: 8\n")
    junit = tmp_path / "j.xml"
    code = main(["-i", str(inv), "--ssh-config", str(sshd.ssh_config),  # type: ignore[attr-defined]
                 "smoke", "--host", "gone", "--junit", str(junit)])
    assert code == int(ExitCode.UNREACHABLE)
    check_junit(junit)
    root = ET.parse(junit).getroot()
    c = cases(root)
    assert c["facts"] == "error:unreachable"
    assert {k for k, v in c.items() if v == "skipped"} == {"flags b8", "cell b8", "probes b8",
                                                           "differential b8"}
    # junit-10.xsd has `skipped` on each <testsuite>, not on <testsuites>
    assert root.get("errors") == "1" and root.find("testsuite").get("skipped") == "4"
    assert root.get("skipped") is None


def test_no_production_budget_is_a_usage_error(tmp_path: Path, sshd: object,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  nob:\n    host: 127.0.0.1\n    python: {sys.executable}\n")
    code = main(["-i", str(inv), "smoke", "--host", "nob"])
    assert code == int(ExitCode.USAGE)
    assert "no production budget" in capsys.readouterr().err


def test_a_diverging_node_fails_with_the_first_diverging_position(
        sshd: object, prefix: Path, tmp_path: Path, runs: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Expected (stale scalar from b16: coding passes, a few greedy tokens differ with graphs):
    exit 9 (garbage), `probes b16` still passes, `differential b16` fails with the task and
    the first diverging token of /generate in its message; with a stored eager baseline no
    eager cell runs and the divergence is still found (texts: the first differing char);
    --no-compare passes (exit 0) and has no differential case."""
    code, root = smoke(tmp_path, sshd, prefix, "--budgets", "16", scenario="stale")
    doc = json.loads(capsys.readouterr().out.split("\n}\n")[0] + "\n}")
    assert code == int(ExitCode.GARBAGE)
    c = cases(root)
    assert c["differential b16"] == "failure:divergence", c
    fail = next(tc for tc in root.iter("testcase") if tc.get("name") == "differential b16")
    msg = fail.find("failure").get("message") or ""
    assert "greedy answers differ; first: " in msg and "token " in msg and "of /generate" in msg
    graph, eager = doc["hosts"][0]["cells"]
    assert graph["outcome"] == "garbage" and eager["config"]["graph"] is False
    # a stored eager baseline (the eager cell above): no eager cell this time
    base = tmp_path / "eager.json"
    base.write_text(json.dumps(eager))
    code, root = smoke(tmp_path, sshd, prefix, "--budgets", "16", "--baseline", str(base),
                       scenario="stale")
    doc = json.loads(capsys.readouterr().out.split("\n}\n")[0] + "\n}")
    assert code == int(ExitCode.GARBAGE)
    assert [x["config"]["graph"] for x in doc["hosts"][0]["cells"]] == [True]
    fail = next(tc for tc in root.iter("testcase") if tc.get("name") == "differential b16")
    assert "char " in (fail.find("failure").get("message") or "")
    code, root = smoke(tmp_path, sshd, prefix, "--budgets", "16", "--no-compare",
                       scenario="stale")
    assert code == 0 and "differential b16" not in cases(root)


def test_worst_exit_code_order() -> None:
    assert worst([0, 0]) == 0
    assert worst([int(ExitCode.UNREACHABLE), int(ExitCode.GARBAGE)]) == int(ExitCode.GARBAGE)
    assert worst([int(ExitCode.DEGRADED), int(ExitCode.CRASH)]) == int(ExitCode.CRASH)
