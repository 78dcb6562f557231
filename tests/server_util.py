"""Shared helpers for the server / experiment tests (imported by test_server_*,
test_experiment_* and others): a testbed installed into a tmp prefix, SSH test hosts that run it,
process counting from /proc. test_server_util.py checks the helpers themselves."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from testbed_util import free_port, install_prefix

from ddprobe.cli import main
from ddprobe.inventory import Host, ServerSettings

if TYPE_CHECKING:
    from conftest import SshServer

# Five quick tasks of the bundled suite: enough to tell ok from garbage, fast to probe.
TASKS = ("reverse_words", "is_palindrome", "fizzbuzz", "fibonacci", "flatten")
# Simulated GPU time dominates Python's own at this scale (so tok/s compares like on a GPU),
# while start-up (a six-minute load at scale 1) takes about a second.
TIME_SCALE, STARTUP_SCALE = "0.1", "0.002"


def tb_env(prefix: Path, *, scale: str = TIME_SCALE,
                startup: str = STARTUP_SCALE) -> dict[str, str]:
    return {"PYTHONPATH": str(prefix), "DDTESTBED_TIME_SCALE": scale,
            "DDTESTBED_STARTUP_SCALE": startup, "PYTHONDONTWRITEBYTECODE": "1"}


def tb_server(port: int, workdir: Path, *, scenario: str = "seed",
                   **kw: object) -> ServerSettings:
    fields: dict[str, object] = {
        "port": port, "model_path": "ddtestbed/tiny-coder", "algorithm": "DDTREE",
        "budget_flag": "ddtree",
        "draft_model_path": "ddtestbed/tiny-drafter", "budget": 8, "max_bs": 64,
        "args": ("--testbed-scenario", scenario), "workdir": str(workdir), "health_timeout": 30.0,
        "stop_timeout": 5.0}
    fields.update(kw)
    return ServerSettings(**fields)  # type: ignore[arg-type]


def inventory_text(alias: str, prefix: Path, port: int, workdir: Path, *,
                   scenario: str = "seed", name: str = "gpu", extra_server: str = "",
                   env: dict[str, str] | None = None, health_timeout: float = 30) -> str:
    e = {**tb_env(prefix), **(env or {})}
    env_lines = "".join(f"      {k}: '{v}'\n" for k, v in e.items())
    return (f"hosts:\n  {name}:\n    host: {alias}\n    python: {sys.executable}\n"
            f"    package: ddtestbed\n    env:\n{env_lines}"
            f"    server:\n      port: {port}\n      model_path: ddtestbed/tiny-coder\n"
            f"      algorithm: DDTREE\n      budget_flag: ddtree\n"
            f"      draft_model_path: ddtestbed/tiny-drafter\n      budget: 8\n"
            f"      max_bs: 64\n      args: ['--testbed-scenario', '{scenario}']\n"
            f"      workdir: {workdir}\n      health_timeout: {health_timeout:g}\n"
            f"      stop_timeout: 5\n"
            + extra_server)


def procs_with(needle: str) -> list[int]:
    """Live (non-zombie) processes whose environment or command line contains `needle`."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
            if state in (b"Z", b"X"):
                continue
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read()
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmd = fh.read()
        except (OSError, IndexError):
            continue
        if needle.encode() in env or needle.encode() in cmd:
            out.append(int(name))
    return sorted(out)


class CliHost:
    """One inventory entry (host `gpu`) for the loopback sshd, and `ddprobe` against it."""

    # Two requests in flight: on a small shared CI machine more would make the testbed's own
    # Python work, not its simulated GPU time, set the tok/s that the tests compare.
    FAST = ("--tasks", ",".join(TASKS), "--max-tokens", "160", "--concurrency", "2")

    def __init__(self, sshd: SshServer, prefix: Path, tmp: Path, *, scenario: str = "seed",
                 extra_server: str = "", scale: str = TIME_SCALE) -> None:
        self.sshd, self.port, self.workdir = sshd, free_port(), tmp / "work"
        self.inv = tmp / "hosts.yaml"
        self.inv.write_text(inventory_text(
            sshd.alias, prefix, self.port, self.workdir, scenario=scenario,
            extra_server=extra_server, env={"DDTESTBED_TIME_SCALE": scale}))

    def ddprobe(self, *args: str) -> int:
        return main(["-i", str(self.inv), "--ssh-config", str(self.sshd.ssh_config),
                     *args])

    def run(self, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
        code = self.ddprobe("run", "-H", "gpu", "--json", *self.FAST, *args)
        cap = capsys.readouterr()
        try:
            doc = json.loads(cap.out)
        except json.JSONDecodeError:
            raise AssertionError(f"no JSON (exit {code}): {cap.out!r} {cap.err!r}") from None
        return code, doc

    def state(self) -> dict | None:
        p = self.workdir / "server.json"
        return json.loads(p.read_text()) if p.exists() else None

    def stop(self) -> None:
        self.ddprobe("server", "stop", "-H", "gpu")
        reap(self.workdir)


def reap(workdir: Path) -> list[int]:
    """Kill what a failed test may have left running from `workdir` (its server.json's group
    and marker), so one failure does not leave orphans on the machine; the pids killed."""
    state = workdir / "server.json"
    if not state.exists():
        return []
    try:
        marker = json.loads(state.read_text()).get("marker", "")
    except ValueError:
        return []
    pids = procs_with(f"DDPROBE_SERVER_MARKER={marker}") if marker else []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


# tb_prefix and tb_host are fixtures for every test through conftest's import of them (a test
# module that imported them would get its own copies: one testbed install per module)
@pytest.fixture(scope="session")
def tb_prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_prefix(tmp_path_factory.mktemp("server-tb") / "site")


@pytest.fixture
def tb_host(make_host: Callable[..., Host], tb_prefix: Path,
            tmp_path: Path) -> Iterator[Host]:
    """The testbed behind the loopback sshd, seed scenario, its own port and workdir."""
    yield make_host("gpu-a", python=sys.executable, package="ddtestbed",
                    env=tb_env(tb_prefix), server=tb_server(free_port(), tmp_path / "work"))
    reap(tmp_path / "work")
