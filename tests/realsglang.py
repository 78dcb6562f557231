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
    """The cached 0.5.11 runtime venv's python (built on first use)."""
    if os.environ.get("DDPROBE_NO_SGLANG_VENV"):
        pytest.skip("DDPROBE_NO_SGLANG_VENV is set")
    if os.environ.get("DDPROBE_SGLANG_VENV"):
        return Path(os.environ["DDPROBE_SGLANG_VENV"])
    from conftest import cache_lock
    with cache_lock(f"venv-{VERSION}-runtime"):
        return _runtime_python()


def _runtime_python() -> Path:
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


# What a release's `ServerArgs.add_cli_args` needs beyond the 0.5.11 runtime venv (found by
# running it there until it ran): 0.5.21-0.5.23 only msgspec (arg_groups/arg_utils.py builds
# `Arg` on it); 0.4.10.post2-0.5.6.post2 import fastapi and xgrammar on the way (fastapi 0.118
# is the one that imports beside the runtime's starlette 0.48; xgrammar 0.1.25 the last without
# apache-tvm-ffi).
ARGS_EXTRA = ("msgspec==0.23.0",)
OLD_ARGS_EXTRA = ("fastapi==0.118.0", "xgrammar==0.1.25")


def args_extra(version: str) -> tuple[str, ...]:
    parts = tuple(int(x) for x in version.split(".")[:3] if x.isdigit())
    return ARGS_EXTRA if parts >= (0, 5, 21) else (*ARGS_EXTRA, *OLD_ARGS_EXTRA)


def sglang_args_python(version: str) -> Path:
    """A small venv holding the REAL SGLang `version` that runs its own parser: the wheel and
    the few modules args_extra names installed --no-deps, over the 0.5.11 runtime venv's
    site-packages (torch 2.14.1, numpy, transformers...), which a .pth file appends to sys.path
    after its own, so this venv's sglang is the one imported. 0.5.21 pins torch 2.13.0 and 0.5.22/0.5.23 pin
    2.14.1; the parser does not call torch, it only imports it (named in the test)."""
    runtime = sglang_runtime_python()
    from conftest import CACHE, _wheel
    venv = CACHE / "venvs" / f"sglang-{version}-args"
    py, marker = venv / "bin" / "python", venv / ".ddprobe-ready"
    extra = args_extra(version)
    want = f"{version} over {runtime} + {' '.join(extra)}"
    if marker.exists() and py.exists() and marker.read_text() == want:
        return py
    import shutil
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True,
                               check=True).stdout.strip())
    rt_site = subprocess.run([str(runtime), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True,
                             check=True).stdout.strip()
    site.mkdir(parents=True, exist_ok=True)
    (site / "zz-ddprobe-runtime.pth").write_text(rt_site + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                    "--disable-pip-version-check", "--target", str(site), str(_wheel(version)),
                    *extra], check=True)
    marker.write_text(want)
    return py
