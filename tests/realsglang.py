"""A cached venv holding the REAL SGLang 0.5.11 and what its server_args module needs on a CPU.

Built once per machine under DDPROBE_TEST_CACHE (about 4 minutes, 5.5 GB: torch 2.14.1's CUDA
build is the torch that imports beside a torchvision here; see the requirements file's header).
Tests never import sglang themselves: they run this venv's python as the "host" interpreter.
DDPROBE_SGLANG_VENV=/path/to/python uses an existing one; DDPROBE_NO_SGLANG_VENV=1 skips.
The venv is installed without bytecode (--no-compile: torch has thousands of modules) and its
bytecode is written once by one import of sglang's server_args (BYTECODE_MARKER), whatever
PYTHONDONTWRITEBYTECODE says: every later import reads it instead of compiling (~half its CPU).

`real_parsers(versions)`: the option strings each release's own parser defines, computed for
all the releases asked in one process and kept in the cache keyed by what decides them.
"""
from __future__ import annotations

import hashlib
import json
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
        py = _runtime_python()
        _write_bytecode(py)
        return py


BYTECODE_MARKER = ".ddprobe-bytecode"


def _write_bytecode(py: Path) -> None:
    """Once per venv: import what the tests import, with bytecode writing on."""
    marker = py.parent.parent / BYTECODE_MARKER
    if marker.exists():
        return
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([str(py), "-c", "import sglang.srt.server_args"], env=env, cwd=py.parent,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   timeout=1800)
    marker.write_text("bytecode written by one import of sglang.srt.server_args\n")


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
    after its own, so this venv's sglang is the one imported. 0.5.21 pins torch 2.13.0 and
    0.5.22/0.5.23 pin 2.14.1; the parser does not call torch, it only imports it (named in the
    test)."""
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


# The option strings a release's own parser defines (`ServerArgs.add_cli_args`), each release's
# sglang imported in turn in ONE process of the runtime venv: torch and transformers, most of
# an import's time, are imported once; each release comes from the front of sys.path (its
# args venv's site-packages, which holds the release and args_extra) and is dropped from
# sys.modules before the next. `file` names the module that built the parser.
PARSERS_PROGRAM = r'''
import argparse, importlib, json, sys
out = {}
for version, site in json.loads(sys.argv[1]).items():
    sys.path.insert(0, site)
    importlib.invalidate_caches()
    import sglang.srt.server_args as sa
    p = argparse.ArgumentParser(); sa.ServerArgs.add_cli_args(p)
    out[version] = {"file": sa.__file__,
                    "options": sorted(s for a in p._actions for s in a.option_strings)}
    sys.path.remove(site)
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        del sys.modules[name]
print("JSON" + json.dumps(out))
'''


def _purelib(py: Path) -> str:
    return subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True,
                          check=True).stdout.strip()


def _parser_key(version: str, runtime: Path) -> str:
    """What decides a release's parser: its wheel, args_extra, the runtime venv (its
    requirements), the program, this interpreter's version."""
    from conftest import _wheel
    h = hashlib.sha256(Path(_wheel(version)).read_bytes())
    for part in (" ".join(args_extra(version)), REQS.read_text(), str(runtime), PARSERS_PROGRAM,
                 sys.version):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:20]


def real_parsers(versions: tuple[str, ...]) -> dict[str, dict]:
    """{version: {"file", "options"}} of each release's own parser (see PARSERS_PROGRAM): read
    from the test cache (CACHE/parsers, keyed by _parser_key), the missing ones computed in
    one process and stored there."""
    from conftest import CACHE
    runtime = sglang_runtime_python()
    out: dict[str, dict] = {}
    todo: dict[str, Path] = {}
    sites: dict[str, str] = {}
    for v in versions:
        py = sglang_args_python(v)
        f = CACHE / "parsers" / f"sglang-{v}-{_parser_key(v, runtime)}.json"
        if f.is_file():
            out[v] = json.loads(f.read_text())
        else:
            todo[v], sites[v] = f, _purelib(py)
    if todo:
        p = subprocess.run([str(runtime), "-c", PARSERS_PROGRAM, json.dumps(sites)],
                           capture_output=True, text=True, timeout=1200)
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("JSON")), None)
        assert line, f"a release's add_cli_args failed (rc {p.returncode}): {p.stderr[-2000:]}"
        for v, doc in json.loads(line[4:]).items():
            f = todo[v]
            f.parent.mkdir(parents=True, exist_ok=True)
            tmp = f.with_name(f"{f.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, f)  # sessions side by side: the same content, written whole
            out[v] = doc
    return out
