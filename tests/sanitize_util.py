"""The sanitize-cell tests' host (test_sanitize_cell, test_latent): the CPU testbed on a local
host, with a compute-sanitizer stand-in on its PATH (a real program that, like the real tool,
takes `--tool memcheck --print-limit 20` and the server's command, runs the server as its child
and prints the real tool's banner and summary lines)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from server_util import tb_env, tb_server
from testbed_util import free_port

from ddprobe.inventory import Host

STAND_IN = """#!/bin/sh
# compute-sanitizer stand-in (no GPU here): runs the program like the real tool, same banner
echo "========= COMPUTE-SANITIZER"
echo "stand-in: $1 $2 $3 $4 caching-off=${PYTORCH_NO_CUDA_MEMORY_CACHING:-unset}"
shift 4
"$@"
rc=$?
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
"""


def sanitize_host(prefix: Path, tmp: Path, bindir: Path | None) -> Host:
    """A local host running the CPU testbed from `prefix`, the compute-sanitizer stand-in's
    `bindir` (if any) first on its PATH."""
    env = dict(tb_env(prefix))
    env["DDTESTBED_DEVICE"] = "cpu"
    if bindir is not None:
        env["PATH"] = f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return Host(name="san", host="localhost", python=sys.executable, package="ddtestbed",
                env=tuple(env.items()), transport="local",
                server=tb_server(free_port(), tmp / "work"))
