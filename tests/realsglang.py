"""A cached venv holding the REAL SGLang 0.5.11 and what its server_args module needs on a CPU.

Built once per machine under DDPROBE_TEST_CACHE (about 4 minutes, 5.5 GB: torch 2.14.1's CUDA
build is the torch that imports beside a torchvision here; see the requirements file's header).
Tests never import sglang themselves: they run this venv's python as the "host" interpreter.
DDPROBE_SGLANG_VENV=/path/to/python uses an existing one; DDPROBE_NO_SGLANG_VENV=1 skips.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

VERSION = "0.5.11"
REQS = Path(__file__).parent / "data" / f"sglang-{VERSION}-cpu-requirements.txt"


def sglang_runtime_python() -> Path:
    if os.environ.get("DDPROBE_NO_SGLANG_VENV"):
        pytest.skip("DDPROBE_NO_SGLANG_VENV is set")
    if os.environ.get("DDPROBE_SGLANG_VENV"):
        return Path(os.environ["DDPROBE_SGLANG_VENV"])
    from conftest import CACHE, _wheel
    venv = CACHE / "venvs" / f"sglang-{VERSION}-runtime"
    py, marker = venv / "bin" / "python", venv / ".ddprobe-ready"
    if marker.exists() and py.exists() and marker.read_text() == REQS.read_text():
        return py
    import shutil
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(venv.parent).free
    if free < 8 << 30:
        pytest.skip(f"the real SGLang {VERSION} venv needs ~6 GB; {free >> 20} MiB free under "
                    f"{venv.parent} (set DDPROBE_TEST_CACHE elsewhere)")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
    subprocess.run(pip + ["torch==2.14.1", "torchvision==0.29.1"], check=True)
    subprocess.run(pip + ["--no-deps", "-r", str(REQS), str(_wheel(VERSION))], check=True)
    marker.write_text(REQS.read_text())
    return py
