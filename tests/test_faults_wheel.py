"""The installed tool is complete: a wheel built from this checkout, installed in a fresh venv
outside the clone, runs the README's commands (issue 15.6).

Expected (written first): `patch list` names ddtestbed-custom-mask and the 0.5.10 patch;
`playbook run playbooks/ddtree-graph-buffers.yaml --dry-run` resolves the shipped playbook;
the quick start `bisect --host testbed --budgets 8,16,32,64` gives ok / buffer_sizing /
graph_capture / buffer_sizing (exit 1); `bisect --host testbed --budgets 8,16 --confirm-patch
ddtestbed-custom-mask` confirms the fix (b16 passes with it and it is kept; exit 1: b16
failed without it), `patch status` shows it and
`patch revert --all` removes it. Nothing is imported from the clone: the venv's ddprobe is the
wheel's (its __file__ is checked), run from a directory that is not the clone.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from testbed_util import free_port

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                    "--disable-pip-version-check", "-w", str(d / "dist"), str(ROOT)],
                   check=True, cwd=d)
    wheel = next((d / "dist").glob("ddprobe-*.whl"))
    venv = d / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps",
                    "-q", "--disable-pip-version-check", str(wheel)], check=True, cwd=d)
    # ddprobe's dependencies come from this interpreter's site-packages as a plain path (its
    # .pth files, the editable install of the clone among them, are not processed there)
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    Path(site.stdout.strip(), "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def _ddprobe(venv: Path, cwd: Path, *args: str,
             env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / "ddprobe"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=400)


def test_readme_commands_from_a_wheel(installed: Path, tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DDPROBE_"))}
    env.update(XDG_DATA_HOME=str(tmp_path / "xdg"), DDPROBE_RUNS=str(tmp_path / "runs"),
               DDPROBE_TESTBED_PORT=str(free_port()), NO_COLOR="1", HOME=str(tmp_path))
    where = subprocess.run([str(installed / "bin" / "python"), "-c",
                            "import ddprobe; print(ddprobe.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(installed)), where  # the wheel's copy, not the clone's

    res = _ddprobe(installed, work, "patch", "list", "--json", env=env)
    assert res.returncode == 0, res.stderr
    ids = {p["id"] for p in json.loads(res.stdout)}
    assert {"ddtestbed-custom-mask", "sglang-0.5.10-triton-custom-mask"} <= ids

    res = _ddprobe(installed, work, "playbook", "run", "playbooks/ddtree-graph-buffers.yaml",
                   "--host", "testbed", "--dry-run", env=env)
    assert res.returncode == 0, res.stderr
    assert "ddtestbed-custom-mask" in res.stdout + res.stderr

    res = _ddprobe(installed, work, "bisect", "--host", "testbed", "--budgets", "8,16,32,64",
                   "--json", env=env)
    assert res.returncode == 1, res.stderr[-3000:]
    kinds = [(tuple(v["budgets"]), v["kind"]) for v in json.loads(res.stdout)["verdicts"]]
    # b64 carries two defects: the workspace, and once a smaller max bs cures it, b32's
    assert kinds == [((8,), "ok"), ((16,), "buffer_sizing"), ((32,), "graph_capture"),
                     ((64,), "buffer_sizing"), ((64,), "graph_capture")], kinds

    res = _ddprobe(installed, work, "bisect", "--host", "testbed", "--budgets", "8,16",
                   "--confirm-patch", "ddtestbed-custom-mask", env=env)
    assert res.returncode == 14, res.stderr[-3000:]  # b16's only failure: the patch fixed it
    assert "ddtestbed-custom-mask: fixes a failure mode; kept applied on testbed" in res.stderr
    res = _ddprobe(installed, work, "patch", "status", "--host", "testbed", env=env)
    assert res.returncode == 0 and "ddtestbed-custom-mask" in res.stdout, res.stderr
    res = _ddprobe(installed, work, "patch", "revert", "--all", "--host", "testbed", env=env)
    assert res.returncode == 0, res.stderr
    res = _ddprobe(installed, work, "patch", "status", "--host", "testbed", env=env)
    assert res.returncode == 0 and "no patches applied" in res.stdout, res.stdout
