"""Issue 13's two defects: a multi-host run with one host locked leaves no other host locked
and no run to resume; `fan_out` reports a hung host as `timeout`, not `failed`.

Expected (written before running): with gpu-a (or gpu-b) locked by another live process,
`sweep` and `bisect` over gpu-a,gpu-b exit 12, the other host has no lock file afterwards,
the locked host keeps the other run's lock untouched, and no run directory is left behind
(so `report latest` offers nothing to resume).
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from bisect_util import TASKS, Site, ddprobe, lock_by_another_run, write_inventory

from ddprobe import remote
from ddprobe.exitcodes import ExitCode
from ddprobe.inventory import Host

pytestmark = pytest.mark.ssh


@pytest.mark.parametrize("command", ["sweep", "bisect"])
@pytest.mark.parametrize("locked", ["gpu-a", "gpu-b"])
def test_one_locked_host_leaves_the_others_unlocked(sshd, sshd2, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str],
                                                   command: str, locked: str) -> None:
    runs = tmp_path / "runs"
    monkeypatch.setenv("DDPROBE_RUNS", str(runs))
    a, b = Site(sshd, tmp_path, name="gpu-a"), Site(sshd2, tmp_path, name="gpu-b")
    inv = write_inventory(tmp_path, a, b)
    merged = tmp_path / "ssh_config_ab"
    merged.write_text(sshd.ssh_config.read_text().split("Host *")[0]
                      + sshd2.ssh_config.read_text())
    site, other = (a, b) if locked == "gpu-a" else (b, a)
    lock = lock_by_another_run(site, sshd.pid)  # a live process that is not this one
    before = lock.read_text()
    code = ddprobe(inv, merged, command, "--host", "gpu-a,gpu-b", "--budgets", "8",
                   "--tasks", TASKS)
    err = capsys.readouterr().err
    assert code == int(ExitCode.LOCKED), err
    assert f"{locked} is locked by" in err
    assert not (other.workdir / "lock").exists(), "the other host was left locked"
    assert lock.read_text() == before  # the other run's lock is not touched
    left = list(runs.iterdir()) if runs.is_dir() else []
    assert left == [], f"a run that never started was left to resume: {left}"


def test_fan_out_deadline_is_timeout_and_fn_timeouts_are_named() -> None:
    h = Host(name="here", host="here", transport="local")

    def hang(_: Host) -> None:
        time.sleep(2)

    def sock_timeout(_: Host) -> None:
        raise TimeoutError("timed out reading the banner")

    res = remote.fan_out([h, h], hang, deadline=0.2)
    assert [o.status for o in res] == ["timeout", "timeout"]
    assert res[0].error == "no answer within 0.2s"
    own = remote.fan_out([h], sock_timeout, deadline=5)
    assert own[0].status == "timeout" and own[0].error == "timed out reading the banner"
    ok = remote.fan_out([h], lambda _: 42, deadline=5)
    assert ok[0].status == "ok" and ok[0].value == 42
