"""Shared helpers of the `ddprobe bisect` SSH tests (test_bisect_ssh, test_bisect_sweep,
test_faults_*, test_smoke): a testbed site behind a real loopback sshd, its inventory, ddprobe
run in-process, and the checks that nothing was left on the host."""
from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import pytest
from server_util import inventory_text, procs_with
from testbed_util import free_port, install_prefix

from ddprobe.cli import main
from ddprobe.inventory import load_inventory
from ddprobe.remote import RemoteOptions, connect
from ddprobe.sources.patches import applied_ids, patch_status

REPO = Path(__file__).resolve().parents[1]
# fast simulated GPU: start-up ~1 s, a garbage answer (max tokens at acceptance 1) ~1 s
ENV = {"DDTESTBED_TIME_SCALE": "0.01", "DDTESTBED_STARTUP_SCALE": "0.002"}
TASKS = "reverse_words,is_palindrome,fizzbuzz"


class Site:
    """One SSH test host running the testbed from its own install, and ddprobe against it."""

    def __init__(self, sshd: object, tmp: Path, *, scenario: str = "seed", name: str = "gpu",
                 labels: str = "") -> None:
        self.sshd, self.name, self.scenario, self.labels = sshd, name, scenario, labels
        self.prefix = install_prefix(tmp / f"{name}-site")
        self.port = free_port()
        self.workdir = tmp / f"{name}-work"
        self.entry = self.entry_with()

    def entry_with(self, env: dict[str, str] | None = None, health_timeout: float = 30) -> str:
        """This host's inventory entry, with more environment for its server (a start-up
        scale: the host's env is what reaches the server; ddprobe's own environment does not
        travel over SSH) or another health timeout."""
        # facts read the scenario's GPU through the testbed's nvidia-smi stand-in
        full = {**ENV, "DDTESTBED_SCENARIO": self.scenario,
                "DDPROBE_NVIDIA_SMI": f"{sys.executable} -m ddtestbed.nvidia_smi", **(env or {})}
        text = inventory_text(self.sshd.alias, self.prefix, self.port, self.workdir,  # type: ignore[attr-defined]
                              scenario=self.scenario, name=self.name, env=full,
                              health_timeout=health_timeout)
        return text.split("hosts:\n", 1)[1] + (f"    labels: {{{self.labels}}}\n"
                                                if self.labels else "")

    def host(self, inv: Path) -> object:
        return load_inventory(str(inv)).get(self.name)


def write_inventory(tmp: Path, *sites: Site, entries: list[str] | None = None) -> Path:
    """tmp/hosts.yaml with the sites' entries (or the `entries` given, e.g. `entry_with`)."""
    inv = tmp / "hosts.yaml"
    inv.write_text("hosts:\n" + "".join(entries if entries is not None
                                        else [s.entry for s in sites]))
    return inv


def ddprobe(inv: Path, ssh_config: Path, *args: str) -> int:
    return main(["-i", str(inv), "--ssh-config", str(ssh_config), *args])


def bisect_json(capsys: pytest.CaptureFixture[str], inv: Path, ssh_config: Path, *args: str
                ) -> tuple[int, dict]:
    code = ddprobe(inv, ssh_config, "bisect", "--json", "--tasks", TASKS, *args)
    cap = capsys.readouterr()
    try:
        return code, json.loads(cap.out)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON (exit {code}): {cap.out[-2000:]!r}\n{cap.err[-4000:]}"
                             ) from None


def verdicts(doc: dict) -> dict[tuple[int, ...], dict]:
    return {tuple(v["budgets"]): v for v in doc["verdicts"]}


def assert_clean(inv: Path, site: Site, ssh_config: Path | None = None) -> None:
    """No temporary patch left in the install, no testbed server left running (the host reached
    through `ssh_config`, by default its own sshd's)."""
    h = site.host(inv)
    cfg = ssh_config or site.sshd.ssh_config  # type: ignore[attr-defined]
    opts = RemoteOptions(ssh_config=str(cfg))
    with connect(h, opts) as r:  # type: ignore[arg-type]
        assert applied_ids(patch_status(r, host=h)) == []  # type: ignore[arg-type]
    assert procs_with(f"--port\x00{site.port}\x00") == []



def lock_by_another_run(site: Site, pid: int, token: str = "0" * 32) -> Path:
    """The lock file another live ddprobe run (pid) on this machine would hold on `site`."""
    site.workdir.mkdir(parents=True, exist_ok=True)
    now = time.time()
    lock = site.workdir / "lock"
    lock.write_text(json.dumps({"owner": "other@" + socket.gethostname(),
                                "machine": socket.gethostname(), "pid": pid, "time": now,
                                "since": now, "command": "ddprobe bisect (another run)",
                                "token": token}))
    return lock
