"""Host facts: OS, CPUs, memory, GPUs, CUDA, the interpreter, the install, packages, the server.

Gathered in ONE round-trip by a small Python program run with the host's interpreter; the
package of interest is found with importlib WITHOUT importing it (importing sglang pulls torch
and can take minutes or fail).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ddprobe.errors import RemoteError
from ddprobe.inventory import Host
from ddprobe.remote import Remote
from ddprobe.untrusted import clean

_FACTS_SRC = r'''
import importlib.metadata as md, importlib.util, json, os, platform, re, shutil, socket
import subprocess, sys
pkg, port, bind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def sh(argv, t=10):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=t,
                           stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout, p.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, "", str(e)
f = {"hostname": socket.gethostname(), "kernel": platform.release(), "arch": platform.machine()}
osname = platform.system()
try:
    rel = dict(l.split("=", 1) for l in open("/etc/os-release").read().splitlines() if "=" in l)
    osname = rel.get("PRETTY_NAME", osname).strip('"')
except OSError:
    pass
f["os"] = osname
f["cpus"] = os.cpu_count()
mem = None
try:
    for l in open("/proc/meminfo"):
        if l.startswith("MemTotal:"):
            mem = int(l.split()[1]) // 1024
except OSError:
    pass
f["memory_mib"] = mem
gpus, driver, cuda = [], None, None
import shlex
smi_cmd = os.environ.get("DDPROBE_NVIDIA_SMI", "").strip()
smi = shlex.split(smi_cmd) if smi_cmd else (
    [shutil.which("nvidia-smi")] if shutil.which("nvidia-smi") else None)
if smi:
    rc, out, err = sh([*smi, "--query-gpu=name,compute_cap,memory.total,driver_version",
                       "--format=csv,noheader,nounits"])
    if rc == 0:
        for line in out.strip().splitlines():
            parts = [x.strip() for x in line.split(",")]
            if len(parts) >= 4:
                cap = parts[1]
                try:
                    mem_g = int(float(parts[2]))
                except ValueError:
                    mem_g = None
                gpus.append({"name": parts[0], "compute_cap": cap,
                             "sm": ("sm_" + cap.replace(".", "")
                                    if re.match(r"^\d+\.\d+$", cap) else None),
                             "memory_mib": mem_g, "driver": parts[3]})
                driver = parts[3]
    rc, out, err = sh(list(smi))
    m = re.search(r"CUDA Version:\s*([\d.]+)", out or "")
    if m:
        cuda = m.group(1)
nvcc = shutil.which("nvcc") or (
    "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
if nvcc:
    rc, out, err = sh([nvcc, "--version"])
    m = re.search(r"release ([\d.]+)", out or "")
    if m:
        f["nvcc"] = m.group(1)
        cuda = cuda or m.group(1)
san = shutil.which("compute-sanitizer") or next(
    (p for p in ["/usr/local/cuda/bin/compute-sanitizer"] if os.path.exists(p)), None)
f["compute_sanitizer"] = san
f["gpus"], f["driver"], f["cuda"] = gpus, driver, cuda
f["python"] = {"path": sys.executable, "version": platform.python_version()}
inst = None
try:
    spec = importlib.util.find_spec(pkg)
except (ImportError, ValueError):
    spec = None
if spec is not None:
    loc = list(spec.submodule_search_locations or [])
    path = loc[0] if loc else os.path.dirname(spec.origin or "")
    ver = None
    try:
        ver = md.version(pkg)
    except md.PackageNotFoundError:
        try:
            src = open(os.path.join(path, "version.py")).read()
            m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", src)
            ver = m.group(1) if m else None
        except OSError:
            pass
    import hashlib
    h, nfiles = hashlib.sha256(), 0
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", ".ddprobe"))
        for name in sorted(files):
            if name.endswith(".py") and nfiles < 20000:
                fp = os.path.join(root, name)
                try:
                    with open(fp, "rb") as fh:
                        data = fh.read()
                except OSError:
                    continue
                h.update(os.path.relpath(fp, path).encode() + b"\0" + data + b"\0")
                nfiles += 1
    inst = {"name": pkg, "version": ver, "path": path,
            "source_hash": h.hexdigest()[:16] if nfiles else None, "source_files": nfiles}
f["install"] = inst
pk = {}
for n in ["torch", "triton", "flashinfer-python", "flashinfer", "sgl-kernel", "sglang-kernel",
          "sglang", "transformers", "vllm", pkg]:
    try:
        pk[n] = md.version(n)
    except md.PackageNotFoundError:
        pass
f["packages"] = pk
srv = {"port": port, "listening": False, "health": None}
try:
    with socket.create_connection((bind, port), timeout=1.5):
        srv["listening"] = True
except OSError:
    pass
if srv["listening"]:
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://{bind}:{port}/health", timeout=3) as r:
            srv["health"] = r.status
    except Exception as e:
        srv["health"] = str(getattr(e, "code", "") or type(e).__name__)
f["server"] = srv
print(json.dumps(f))
'''


@dataclass
class Facts:
    host: str
    hostname: str = ""
    os: str = ""
    kernel: str = ""
    arch: str = ""
    cpus: int | None = None
    memory_mib: int | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    driver: str | None = None
    cuda: str | None = None
    nvcc: str | None = None
    compute_sanitizer: str | None = None
    python: dict[str, Any] = field(default_factory=dict)
    install: dict[str, Any] | None = None  # {"name", "version", "path"} of host.package
    packages: dict[str, str] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)

    @property
    def sglang(self) -> dict[str, Any] | None:
        return self.install

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sglang"] = self.install if self.install and self.install["name"] == "sglang" else (
            {"version": self.packages.get("sglang"), "path": None}
            if "sglang" in self.packages else None)
        return d


def gather_facts(r: Remote, host: Host) -> Facts:
    s = host.server
    res = r.python(["-c", _FACTS_SRC, host.package, str(s.port), s.bind], timeout=60)
    if not res.ok:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise RemoteError(f"{host.name}: cannot run the host's interpreter {host.python!r} "
                          f"(exit {res.exit_code}): {last}")
    try:
        d = json.loads(res.stdout.strip().splitlines()[-1])
        return Facts(host=host.name, **d)
    except (ValueError, IndexError, RecursionError, TypeError):
        raise RemoteError(f"{host.name}: facts program printed no usable JSON: "
                          f"{clean(res.stdout[-200:])!r}") from None
