"""Benchmark: `ddprobe grep-buffers` over the full sglang 0.5.23 install through a loopback sshd,
against the plain-ssh equivalent (`ssh host grep -rn PATTERN FILES...` over the same files),
side by side in one run.

    python benchmarks/grep_buffers.py [-n 5] [--version 0.5.23] [--backend all]

Three timings, each the median of n runs:
- plain:   `ssh -F cfg host grep -rn -e 'torch\\.(zeros|empty|...)\\(' FILES` (OpenSSH client,
           a new connection each time): only lines, no structure, no sizes;
- ddprobe: `python -m ddprobe grep-buffers --host H --max-bs 64 --budgets 8,16,32
           --context-len 4096 --json` as a subprocess: interpreter start, CLI import, ssh
           connect, one helper round-trip, the AST analysis and sizes, JSON out;
- library: `grep_buffers()` in a running process over a new connection (what bisect pays).
Targets (issue 3): ddprobe end-to-end under 2 s and within 2x of the plain grep.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from conftest import _stop, make_sglang_venv, start_sshd  # noqa: E402

from ddprobe import remote  # noqa: E402
from ddprobe.inventory import Host  # noqa: E402
from ddprobe.sources.buffers import SizingParams, analyse_buffers, wanted_files  # noqa: E402
from ddprobe.sources.fetch import grep_buffers, read_sources  # noqa: E402

PATTERN = r"torch\.(zeros|empty|ones|full|arange)(_like)?\("
TARGET_SECONDS, TARGET_RATIO = 2.0, 2.0


def _median_time(fn: Callable[[], object], n: int) -> float:
    times: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--version", default="0.5.23")
    ap.add_argument("--backend", default="all")
    a = ap.parse_args()
    py = make_sglang_venv(a.version)
    tmp = Path(tempfile.mkdtemp(prefix="ddprobe-bench-"))
    server, proc = start_sshd(tmp / "h0", "gpu-a")
    try:
        cfg = server.ssh_config
        host = Host(name="gpu-a", host="gpu-a", python=str(py))
        inv = tmp / "hosts.yaml"
        inv.write_text(f"hosts:\n  gpu-a:\n    host: gpu-a\n    python: {py}\n")
        params = SizingParams(max_bs=64, budgets=(8, 16, 32), context_len=4096)
        opts = remote.RemoteOptions(ssh_config=str(cfg))

        def library() -> object:
            with remote.connect(host, opts) as r:
                return grep_buffers(r, host, backend=a.backend, params=params)

        rep = library()  # warm the page cache, and learn which files it reads
        pkg = subprocess.run([str(py), "-c", "import importlib.util as u; "
                              "print(u.find_spec('sglang').submodule_search_locations[0])"],
                             capture_output=True, text=True, check=True).stdout.strip()
        files = [os.path.join(pkg, f) for f in rep.files]  # type: ignore[attr-defined]
        plain_argv = ["ssh", "-F", str(cfg), "-o", "ControlMaster=no", "-o",
                      "ControlPath=none", "gpu-a", "grep", "-rnE", "-e", f"'{PATTERN}'", *files]
        cli_argv = [sys.executable, "-m", "ddprobe", "-i", str(inv), "--ssh-config", str(cfg),
                    "grep-buffers", "--host", "gpu-a", "--backend", a.backend, "--max-bs", "64",
                    "--budgets", "8,16,32", "--context-len", "4096", "--json"]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        plain_out = subprocess.run(plain_argv, capture_output=True, text=True, check=True,
                                   stdin=subprocess.DEVNULL).stdout
        t_plain = _median_time(lambda: subprocess.run(
            plain_argv, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL), a.n)
        t_cli = _median_time(lambda: subprocess.run(
            cli_argv, check=True, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL), a.n)
        t_lib = _median_time(library, a.n)
        parts: dict[str, list[float]] = {"connect": [], "round-trip": [], "analysis": []}
        for _ in range(a.n):  # where the library call's time goes
            t0 = time.perf_counter()
            with remote.connect(host, opts) as r:
                t1 = time.perf_counter()
                src = read_sources(r, host, wanted_files(a.backend), follow="helpers")
                t2 = time.perf_counter()
            analyse_buffers(src.texts, backend=a.backend, params=params)
            t3 = time.perf_counter()
            for k, v in zip(parts, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                parts[k].append(v)
        t_import = _median_time(lambda: subprocess.run(
            [sys.executable, "-c", "import ddprobe.cli"], check=True, env=env), 3)
        found = [r for r in rep.rows if r.status == "found"]  # type: ignore[attr-defined]
        nbytes = sum(os.path.getsize(f) for f in files)
        print(f"grep-buffers, sglang {a.version} (backend {a.backend}): {len(files)} files, "
              f"{nbytes / 1e6:.1f} MB of source, through a loopback sshd; median of {a.n}")
        print(f"  plain `ssh host grep -rn`  {t_plain:7.3f} s   "
              f"{len(plain_out.splitlines())} allocation lines, unstructured")
        print(f"  ddprobe CLI end-to-end     {t_cli:7.3f} s   {len(found)} buffers with shapes, "
              f"resolved sizes for 3 budgets, flags  (ratio {t_cli / t_plain:.2f}x)")
        print(f"  ddprobe library call       {t_lib:7.3f} s   (connect + 1 round-trip + "
              f"analysis; ratio {t_lib / t_plain:.2f}x)")
        print("    = " + ", ".join(f"{k} {statistics.median(v):.3f} s" for k, v in parts.items()))
        print(f"  `import ddprobe.cli` alone {t_import:.3f} s (part of the CLI time)")
        load = os.getloadavg()[0]
        print(f"  machine: {os.cpu_count()} CPUs, load average {load:.2f} during the run")
        ok_time = t_cli < TARGET_SECONDS
        ok_ratio = t_cli / t_plain <= TARGET_RATIO
        print(f"target end-to-end < {TARGET_SECONDS:.0f} s: {'met' if ok_time else 'NOT met'}; "
              f"within {TARGET_RATIO:.0f}x of plain grep: {'met' if ok_ratio else 'NOT met'} "
              f"(library call: {'met' if t_lib / t_plain <= TARGET_RATIO else 'NOT met'})")
        return 0 if ok_time and ok_ratio else 1
    finally:
        _stop(proc)


if __name__ == "__main__":
    sys.exit(main())
