"""Benchmark: 50 small commands over one ddprobe connection vs 50 separate `ssh` invocations
(OpenSSH client, no ControlMaster) to the same loopback sshd, side by side in one run; and
`ddprobe hosts --check` on 8 test hosts vs on one.

    python benchmarks/remote_roundtrip.py [-n 50]

Targets (issue 2): ddprobe >= 5x faster than plain ssh; 8 hosts in < 1.5x the time of one.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import start_sshd

from ddprobe import remote
from ddprobe.cli import main as cli_main
from ddprobe.inventory import Host


def _per_call(fn: Callable[[], object], n: int) -> list[float]:
    out: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=50)
    ap.add_argument("--hosts", type=int, default=8)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ddprobe-bench-"))
    servers, procs = [], []
    try:
        s, p = start_sshd(tmp / "h0", "gpu-0")
        servers.append(s)
        procs.append(p)
        for i in range(1, a.hosts):
            s2, p2 = start_sshd(tmp / f"h{i}", f"gpu-{i}", client_key=s.key)
            servers.append(s2)
            procs.append(p2)
        cfg = tmp / "ssh_config"
        cfg.write_text("".join(x.ssh_config.read_text().split("Host *")[0] for x in servers)
                       + "Host *\n  BatchMode yes\n")
        s = servers[0]

        # 1) ddprobe: one connection, n commands (connection set-up included in the total)
        t0 = time.perf_counter()
        with remote.connect(Host(name="gpu-0", host="gpu-0"),
                            remote.RemoteOptions(ssh_config=str(cfg))) as r:
            t_conn = time.perf_counter() - t0
            dd = _per_call(lambda: r.run(["true"], check=True), a.n)
        dd_total = time.perf_counter() - t0

        # 2) plain OpenSSH: a new process and connection per command, no ControlMaster
        argv = ["ssh", "-F", str(cfg), "-o", "ControlMaster=no", "-o", "ControlPath=none",
                "gpu-0", "true"]
        t0 = time.perf_counter()
        ssh = _per_call(lambda: subprocess.run(argv, check=True, stdin=subprocess.DEVNULL), a.n)
        ssh_total = time.perf_counter() - t0

        print(f"{a.n} x `true` on one loopback sshd")
        print(f"{'':24}{'median/cmd':>12}{'total':>10}")
        print(f"{'ddprobe (1 connection)':24}{statistics.median(dd) * 1e3:>10.2f}ms"
              f"{dd_total:>9.3f}s   (connect {t_conn * 1e3:.0f} ms)")
        print(f"{'ssh (new each time)':24}{statistics.median(ssh) * 1e3:>10.2f}ms"
              f"{ssh_total:>9.3f}s")
        ratio_med = statistics.median(ssh) / statistics.median(dd)
        ratio_tot = ssh_total / dd_total
        print(f"ratio (ssh / ddprobe): median {ratio_med:.1f}x, total {ratio_tot:.1f}x "
              f"-> target >= 5x: {'PASS' if ratio_tot >= 5 else 'FAIL'}")

        # 3) hosts --check: 8 hosts vs 1 (parallel fan-out)
        inv = tmp / "hosts.yaml"
        inv.write_text("hosts:\n" + "".join(f"  gpu-{i}: {{}}\n" for i in range(a.hosts))
                       + "groups:\n  all: [" + ", ".join(f"gpu-{i}" for i in range(a.hosts))
                       + "]\n")

        def check(spec: str) -> float:
            times = []
            for _ in range(5):
                t = time.perf_counter()
                rc = cli_main(["--inventory", str(inv), "--ssh-config", str(cfg), "hosts",
                               "--check", "--host", spec, "--json"])
                times.append(time.perf_counter() - t)
                assert rc == 0, rc
            return statistics.median(times)

        import contextlib
        import io
        with contextlib.redirect_stdout(io.StringIO()):
            one = check("gpu-0")
            many = check("all")
        print(f"\nddprobe hosts --check (median of 5): 1 host {one:.3f}s, {a.hosts} hosts "
              f"{many:.3f}s, ratio {many / one:.2f}x -> target < 1.5x: "
              f"{'PASS' if many / one < 1.5 else 'FAIL'}")
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
