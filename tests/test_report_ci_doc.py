"""docs/ci.md: its workflow is valid YAML that pins the host key, keeps the key in a secret,
uploads the JUnit file, and its exit-code table is the one in ddprobe/exitcodes.py."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ddprobe.exitcodes import ExitCode

DOC = Path(__file__).resolve().parents[1] / "docs" / "ci.md"


def _workflow() -> dict[Any, Any]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    (wf,) = [yaml.safe_load(b) for b in blocks if "jobs:" in b]
    return wf


def _run_text(job: dict[str, Any]) -> str:
    return "\n".join(str(s.get("run", "")) for s in job["steps"])


def test_workflow_is_complete_and_pins_the_host_key() -> None:
    wf = _workflow()
    gpu = wf["jobs"]["smoke-gpu"]
    steps = gpu["steps"]
    runs = _run_text(gpu)
    assert gpu["environment"] == "gpu-node" and wf["permissions"]["checks"] == "write"
    key_step = next(s for s in steps if "SSH_KEY" in s.get("env", {}))
    assert key_step["env"]["SSH_KEY"] == "${{ secrets.GPU_SSH_KEY }}"
    assert key_step["env"]["KNOWN_HOSTS"] == "${{ secrets.GPU_KNOWN_HOSTS }}"
    assert "StrictHostKeyChecking yes" in runs
    assert "UserKnownHostsFile ~/.ssh/known_hosts_gpu" in runs
    assert "ssh-keyscan" not in runs and "--accept-new-host-keys" not in runs
    assert "smoke --host gpu --junit smoke-junit.xml --json" in runs
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("mikepenz/action-junit-report@") for u in uses)
    assert any(u.startswith("actions/upload-artifact@") for u in uses)
    junit = next(s for s in steps if s.get("uses", "").startswith("mikepenz/"))
    assert junit["if"] == "always()" and junit["with"]["report_paths"] == "smoke-junit.xml"
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert "smoke-junit.xml" in upload["with"]["path"] and "runs/" in upload["with"]["path"]
    assert "ddprobe smoke --host testbed" in _run_text(wf["jobs"]["smoke-testbed"])


def test_exit_code_table_matches_exitcodes() -> None:
    text = DOC.read_text()
    table = dict(re.findall(r"^\| (\d+) \| ([^|]+) \|", text, re.M))
    for code in (ExitCode.OK, ExitCode.CONFIG, ExitCode.UNREACHABLE, ExitCode.SERVER,
                 ExitCode.REFUSED, ExitCode.CRASH, ExitCode.GARBAGE, ExitCode.DEGRADED,
                 ExitCode.HANG, ExitCode.LOCKED, ExitCode.INTERNAL, ExitCode.INTERRUPTED):
        assert str(int(code)) in table, code
    assert "crash" in table[str(int(ExitCode.CRASH))]
    assert "garbage" in table[str(int(ExitCode.GARBAGE))]
    assert "degraded" in table[str(int(ExitCode.DEGRADED))]
    assert "hang" in table[str(int(ExitCode.HANG))]
    assert "unreachable" in table[str(int(ExitCode.UNREACHABLE))]
    assert "locked" in table[str(int(ExitCode.LOCKED))]
    assert "refused" in table[str(int(ExitCode.REFUSED))]
