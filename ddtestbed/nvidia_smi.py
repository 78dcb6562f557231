"""An `nvidia-smi` stand-in that reports the GPU the testbed scenario names.

ddprobe's facts ask `nvidia-smi` for the GPUs (name, compute capability, memory, driver) and
read `CUDA Version:` from its banner. A host without GPUs that runs the testbed points facts at
this program instead (`DDPROBE_NVIDIA_SMI="python -m ddtestbed.nvidia_smi"`, as the built-in
`testbed` host does), so hosts with different scenarios report different GPUs and are never
merged into one k-ary group. The scenario comes from `$DDTESTBED_SCENARIO` (default `seed`),
the same variable the server reads.

    python -m ddtestbed.nvidia_smi --query-gpu=name,compute_cap,memory.total,driver_version \
        --format=csv,noheader,nounits
"""
from __future__ import annotations

import os
import re
import sys

from .scenario import GpuSpec, ScenarioError, load_scenario


def compute_cap(arch: str) -> str:
    """`sm_103` -> `10.3`, `sm_90` -> `9.0` (nvidia-smi's compute_cap spelling)."""
    m = re.fullmatch(r"sm_(\d+?)(\d)", arch.strip())
    return f"{m.group(1)}.{m.group(2)}" if m else "?"


def _query(gpu: GpuSpec, fields: list[str], header: bool, units: bool) -> str:
    values = {"name": gpu.name, "compute_cap": compute_cap(gpu.arch),
              "memory.total": f"{int(gpu.memory_gib * 1024)}" + ("" if not units else " MiB"),
              "driver_version": gpu.driver, "count": str(gpu.count)}
    rows = []
    if header:
        rows.append(", ".join(fields))
    for _ in range(gpu.count):
        rows.append(", ".join(values.get(f, "[N/A]") for f in fields))
    return "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    try:
        gpu = load_scenario(os.environ.get("DDTESTBED_SCENARIO") or "seed").gpu
    except ScenarioError as e:
        print(f"nvidia-smi (ddtestbed): {e}", file=sys.stderr)
        return 9
    q = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    if q is None:
        print(f"| NVIDIA-SMI {gpu.driver}   Driver Version: {gpu.driver}   "
              f"CUDA Version: {gpu.cuda} |")
        for i in range(gpu.count):
            print(f"|   {i}  {gpu.name}  ({gpu.arch}, ddtestbed scenario) |")
        return 0
    fmt = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), "csv")
    sys.stdout.write(_query(gpu, [f.strip() for f in q.split(",")], "noheader" not in fmt,
                            "nounits" not in fmt))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
