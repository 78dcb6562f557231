"""Shared helpers of the patch tests on a real install (test_patch_host,
test_hostile_hoststate): a copy of the real sglang 0.5.10 wheel install, and hashes of a file and
of a whole tree to prove a refusal wrote nothing."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

TRITON = "srt/layers/attention/triton_backend.py"
RUNNER = "srt/model_executor/cuda_graph_runner.py"
SHIPPED = "sglang-0.5.10-triton-custom-mask"


def copy_install(venv_python: Path, dest: Path) -> Path:
    """site-packages holding a copy of the real wheel install (package + dist-info)."""
    out = subprocess.run([str(venv_python), "-c", "import sysconfig; "
                          "print(sysconfig.get_paths()['purelib'])"], capture_output=True,
                         text=True, check=True).stdout.strip()
    site = dest / "site"
    site.mkdir(parents=True)
    for p in Path(out).iterdir():
        if p.name == "sglang" or (p.name.startswith("sglang-") and p.name.endswith(".dist-info")):
            shutil.copytree(p, site / p.name, symlinks=True)
    return site


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()
