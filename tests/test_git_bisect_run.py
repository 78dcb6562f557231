"""`git bisect run` driving `ddprobe bisect --exit-protocol bisect` (issue 24.1).

A small git repository stands for an SGLang history: each commit holds the inventory of one
testbed host behind the real loopback sshd, and a commit switches the testbed's scenario from
`healthy` to `seed` (the custom mask sized from a default). `git bisect run` must name that
commit. A commit whose script passes a flag ddprobe does not know must abort `git bisect run`
(exit 128), never be marked bad (click's exit 2 would be).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bisect_util import TASKS, Site

pytestmark = pytest.mark.ssh

DDPROBE = str(Path(sys.executable).with_name("ddprobe"))


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env=env, check=check, timeout=900)


def _commit(repo: Path, files: dict[str, str], msg: str) -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", msg)
    return _git(repo, "rev-parse", "HEAD").stdout.strip()


def _repo(tmp: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp / "history"
    repo.mkdir()
    _git(repo, "init", "-q")
    return repo


def test_git_bisect_run_names_the_commit_that_broke_the_server(
        sshd: object, tmp_path: Path, runs: Path) -> None:
    repo = _repo(tmp_path)
    cfg = sshd.ssh_config  # type: ignore[attr-defined]
    script = (f"exec {DDPROBE} -i hosts.yaml --ssh-config {cfg} bisect --host gpu "
              f"--budgets 16 --tasks {TASKS} --exit-protocol bisect\n")
    healthy = Site(sshd, tmp_path, scenario="healthy").entry
    seed = healthy.replace("healthy", "seed")  # the scenario flag and DDTESTBED_SCENARIO
    assert seed.count("seed") == 2, seed
    c1 = _commit(repo, {"check.sh": script, "hosts.yaml": "hosts:\n" + healthy}, "c1 healthy")
    _commit(repo, {"NOTES": "c2\n"}, "c2 still healthy")
    c3 = _commit(repo, {"hosts.yaml": "hosts:\n" + seed}, "c3 seed: the mask from a default")
    c4 = _commit(repo, {"NOTES": "c4\n"}, "c4 still broken")
    # written down before the run: c3 is the first bad commit
    _git(repo, "bisect", "start", c4, c1)
    out = _git(repo, "bisect", "run", "sh", "check.sh", check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"{c3} is the first bad commit" in out.stdout, out.stdout[-3000:]


def test_a_usage_error_aborts_git_bisect_run_instead_of_marking_bad(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    ok = f"exec {DDPROBE} bisect --host testbed --budgets 8 --plan --exit-protocol bisect\n"
    good = _commit(repo, {"check.sh": ok}, "good")
    typo = _commit(repo, {"check.sh": ok.replace("--plan", "--plan --bogus")}, "a typo")
    bad = _commit(repo, {"NOTES": "x\n"}, "bad")
    _git(repo, "bisect", "start", bad, good)
    out = _git(repo, "bisect", "run", "sh", "check.sh", check=False)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "No such option: --bogus" in text and "128" in text, text
    log = _git(repo, "bisect", "log").stdout
    assert f"bad: [{typo}" not in log and "first bad commit" not in text, log
    # every other error before the first cell aborts too: ddprobe's own usage errors and
    # an unknown --exit-protocol value
    for args in (["--budgets", "x"], ["--budgets", "8", "--exit-protocol=svn"],
                 ["--budgets", "8", "--max-bs", "zero"]):
        r = subprocess.run([DDPROBE, "bisect", "--host", "testbed", "--exit-protocol", "bisect",
                            *args], capture_output=True, text=True, timeout=120)
        assert r.returncode == 128, (args, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr
