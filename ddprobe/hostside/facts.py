"""The facts program: OS, CPUs, memory, GPUs, CUDA, the interpreter, the install, packages and
the server's port, in ONE round trip (runs ON the host; standard library only, Python 3.8+).

The package of interest is found with importlib WITHOUT importing it (importing sglang pulls
torch and can take minutes or fail). Op `facts`, request `{"package", "port", "bind"}`; the
result is the record `ddprobe.facts.Facts` reads (its fields, less `host`).
"""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import importlib.util
import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
import sys

if "OpError" not in globals():  # read standalone; on a host common.py's text comes first
    from ddprobe.hostside.common import main

MAX_SOURCE_FILES = 20000
KNOWN_PACKAGES = ("torch", "triton", "flashinfer-python", "flashinfer", "sgl-kernel",
                  "sglang-kernel", "sglang", "transformers", "vllm")


def _sh(argv, t=10):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=t,
                           stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout, p.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, "", str(e)


def _system():
    f: dict[str, object] = {"hostname": socket.gethostname(), "kernel": platform.release(),
                            "arch": platform.machine()}
    osname = platform.system()
    try:
        with open("/etc/os-release") as fh:
            rel = dict(ln.split("=", 1) for ln in fh.read().splitlines() if "=" in ln)
        osname = rel.get("PRETTY_NAME", osname).strip('"')
    except OSError:
        pass
    f["os"] = osname
    f["cpus"] = os.cpu_count()
    mem = None
    try:
        with open("/proc/meminfo") as fh:
            for ln in fh:
                if ln.startswith("MemTotal:"):
                    mem = int(ln.split()[1]) // 1024
    except OSError:
        pass
    f["memory_mib"] = mem
    return f


def _gpu(line):
    parts = [x.strip() for x in line.split(",")]
    if len(parts) < 4:
        return None
    cap = parts[1]
    try:
        mem_g = int(float(parts[2]))
    except ValueError:
        mem_g = None
    return {"name": parts[0], "compute_cap": cap,
            "sm": "sm_" + cap.replace(".", "") if re.match(r"^\d+\.\d+$", cap) else None,
            "memory_mib": mem_g, "driver": parts[3]}


def _gpus():
    """(gpus, driver, the CUDA version nvidia-smi names) from nvidia-smi
    ($DDPROBE_NVIDIA_SMI stands in for it)."""
    gpus: list[dict[str, object]] = []
    driver, cuda = None, None
    smi_cmd = os.environ.get("DDPROBE_NVIDIA_SMI", "").strip()
    smi = shlex.split(smi_cmd) if smi_cmd else (
        [shutil.which("nvidia-smi")] if shutil.which("nvidia-smi") else None)
    if not smi:
        return gpus, driver, cuda
    rc, out, _ = _sh(smi + ["--query-gpu=name,compute_cap,memory.total,driver_version",
                            "--format=csv,noheader,nounits"])
    if rc == 0:
        for line in out.strip().splitlines():
            g = _gpu(line)
            if g is not None:
                gpus.append(g)
                driver = g["driver"]
    _, out, _ = _sh(list(smi))
    m = re.search(r"CUDA Version:\s*([\d.]+)", out or "")
    if m:
        cuda = m.group(1)
    return gpus, driver, cuda


def _cuda_tools(f, cuda):
    nvcc = shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc:
        _, out, _ = _sh([nvcc, "--version"])
        m = re.search(r"release ([\d.]+)", out or "")
        if m:
            f["nvcc"] = m.group(1)
            cuda = cuda or m.group(1)
    f["compute_sanitizer"] = shutil.which("compute-sanitizer") or next(
        (p for p in ["/usr/local/cuda/bin/compute-sanitizer"] if os.path.exists(p)), None)
    return cuda


def _version(pkg, path):
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        pass
    try:
        with open(os.path.join(path, "version.py")) as fh:
            m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", fh.read())
        return m.group(1) if m else None
    except OSError:
        return None


def _source_hash(path):
    """(sha256 of the install's .py files, first 16 hex digits, or None; how many files)."""
    h, nfiles = hashlib.sha256(), 0
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", ".ddprobe"))
        for name in sorted(files):
            if name.endswith(".py") and nfiles < MAX_SOURCE_FILES:
                fp = os.path.join(root, name)
                try:
                    with open(fp, "rb") as fh:
                        data = fh.read()
                except OSError:
                    continue
                h.update(os.path.relpath(fp, path).encode() + b"\0" + data + b"\0")
                nfiles += 1
    return (h.hexdigest()[:16] if nfiles else None), nfiles


def _install(pkg):
    try:
        spec = importlib.util.find_spec(pkg)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    loc = list(spec.submodule_search_locations or [])
    path = loc[0] if loc else os.path.dirname(spec.origin or "")
    digest, nfiles = _source_hash(path)
    return {"name": pkg, "version": _version(pkg, path), "path": path,
            "source_hash": digest, "source_files": nfiles}


def _packages(pkg):
    pk = {}
    for n in KNOWN_PACKAGES + (pkg,):
        try:
            pk[n] = md.version(n)
        except md.PackageNotFoundError:
            pass
    return pk


def _server(bind, port):
    srv = {"port": port, "listening": False, "health": None}
    try:
        with socket.create_connection((bind, port), timeout=1.5):
            srv["listening"] = True
    except OSError:
        pass
    if srv["listening"]:
        import urllib.request
        try:
            with urllib.request.urlopen("http://%s:%d/health" % (bind, port), timeout=3) as r:
                srv["health"] = r.status
        except Exception as e:
            srv["health"] = str(getattr(e, "code", "") or type(e).__name__)
    return srv


def op_facts(req):
    pkg, port, bind = str(req["package"]), int(req["port"]), str(req["bind"])
    f = _system()
    gpus, driver, cuda = _gpus()
    cuda = _cuda_tools(f, cuda)
    f["gpus"], f["driver"], f["cuda"] = gpus, driver, cuda
    f["python"] = {"path": sys.executable, "version": platform.python_version()}
    f["install"] = _install(pkg)
    f["packages"] = _packages(pkg)
    f["server"] = _server(bind, port)
    return f


OPS = {"facts": op_facts}


if __name__ == "__main__":
    sys.exit(main(sys.argv, OPS))
