"""Benchmark: 20 coding probes against the testbed, sequentially vs concurrently, in one run.

    python benchmarks/probe_concurrency.py                 # starts a testbed server itself
    python benchmarks/probe_concurrency.py --url http://127.0.0.1:30000   # a running server

Prints the sequential wall time, the slowest single probe (from the sequential run, where a
probe's time is exactly the gap between consecutive completions), the concurrent wall time and
the ratio concurrent / slowest; target: ratio <= 1.5. Also prints ddprobe's own share of each
probe (code extraction + sandboxed tests), the part not spent waiting for the server.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddprobe.probes import ProbeClient, TaskResult, load_suite, run_probes  # noqa: E402

TARGET_RATIO = 1.5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_testbed(budget: int, time_scale: float) -> tuple[subprocess.Popen[bytes], str, Path]:
    """Start the testbed server (the SGLang stand-in) from this checkout; wait until healthy."""
    port = _free_port()
    log = Path(tempfile.mkstemp(prefix="ddprobe-bench-testbed-", suffix=".log")[1])
    argv = [sys.executable, "-m", "ddtestbed", "--model-path", "ddtestbed/tiny-coder",
            "--port", str(port), "--speculative-algorithm", "DDTREE",
            "--speculative-ddtree-budget", str(budget), "--testbed-time-scale", str(time_scale)]
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env=dict(os.environ, PYTHONPATH=str(ROOT)))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"testbed exited with {proc.returncode}; log: {log}")
        try:
            if httpx.get(url + "/health_generate", timeout=5).status_code == 200:
                return proc, url, log
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop(proc)
    raise SystemExit(f"testbed not healthy after 120 s; log: {log}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def sequential(url: str, ids: list[str]) -> tuple[float, dict[str, float], list[TaskResult]]:
    stamps: list[tuple[str, float]] = []
    t0 = time.perf_counter()
    report = run_probes(url, tasks=ids, concurrency=1,
                        progress=lambda r: stamps.append((r.task_id, time.perf_counter())))
    wall = time.perf_counter() - t0
    per: dict[str, float] = {}
    prev = t0
    for tid, t in stamps:
        per[tid] = t - prev
        prev = t
    return wall, per, list(report.results)


async def _server_alone(url: str, prompts: list[str]) -> tuple[float, float]:
    """Chat requests only (no sandbox, no /generate): one alone, then all at once."""
    async with ProbeClient(url) as c:
        t0 = time.perf_counter()
        await c.chat(prompts[0])
        one = time.perf_counter() - t0
        t0 = time.perf_counter()
        await asyncio.gather(*(c.chat(p) for p in prompts))
        return one, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="probe this running server instead of starting a testbed")
    ap.add_argument("--n", type=int, default=20, help="number of coding probes (default 20)")
    ap.add_argument("--budget", type=int, default=8, help="testbed DDTree budget (a good one)")
    ap.add_argument("--time-scale", type=float, default=0.05,
                    help="testbed time scale (simulated GPU time x scale)")
    args = ap.parse_args()
    ids = [t.id for t in load_suite("coding").tasks[: args.n]]
    proc = None
    url = args.url
    if url is None:
        proc, url, log = start_testbed(args.budget, args.time_scale)
        print(f"testbed: {url} (budget {args.budget}, time scale {args.time_scale}; log {log})")
    try:
        run_probes(url, tasks=ids[:2], concurrency=2)  # warm-up: connections, first batch
        seq_wall, per, seq_results = sequential(url, ids)
        t0 = time.perf_counter()
        conc = run_probes(url, tasks=ids, concurrency=len(ids))
        conc_wall = time.perf_counter() - t0
        prompts = [t.prompt for t in load_suite("coding").tasks[: args.n]]
        srv_one, srv_all = asyncio.run(_server_alone(url, prompts))
    finally:
        if proc is not None:
            stop(proc)
    slow_id, slowest = max(per.items(), key=lambda kv: kv[1])
    ratio = conc_wall / slowest
    own = [r.check_s for r in seq_results if r.check_s is not None]
    own_share = sum(own) / seq_wall if seq_wall else 0.0
    passed = (sum(r.passed for r in seq_results), conc.summary.passed)
    print(f"probes                    {len(ids)} coding tasks "
          f"(passed: sequential {passed[0]}/{len(ids)}, concurrent {passed[1]}/{len(ids)})")
    print(f"sequential wall           {seq_wall:8.3f} s")
    print(f"slowest single probe      {slowest:8.3f} s  ({slow_id})")
    print(f"median single probe       {statistics.median(per.values()):8.3f} s")
    print(f"concurrent wall (c={len(ids):<3})   {conc_wall:8.3f} s")
    print(f"speed-up                  {seq_wall / conc_wall:8.2f} x")
    print(f"concurrent / slowest      {ratio:8.2f}    target <= {TARGET_RATIO}: "
          f"{'MET' if ratio <= TARGET_RATIO else 'MISSED'}")
    print(f"server alone: 1 chat      {srv_one:8.3f} s; {len(ids)} concurrent chats "
          f"{srv_all:.3f} s ({srv_all / srv_one:.1f}x): the floor the server's batching sets")
    print(f"ddprobe's own time        {sum(own):8.3f} s of the sequential wall "
          f"({own_share:.1%}; sandboxed tests, median {statistics.median(own) * 1000:.0f} ms "
          f"per probe)")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    raise SystemExit(main())
