"""Messages a new user meets (issue 24.15): did-you-mean for host and patch names, a missing
identity_file named, `hosts --check` telling a host-key refusal and an auth failure from an
unreachable host, `patch apply` of an unknown patch a usage error naming only real
directories, a no-op apply without a diff. Real: the loopback sshd and the testbed on it."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from bisect_util import Site, write_inventory

from ddprobe.cli import main
from ddprobe.exitcodes import ExitCode


def test_an_unknown_host_gets_a_did_you_mean(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts:\n  b300-1: {}\n  rtxpro: {}\n")
    assert main(["-i", str(inv), "facts", "--host", "b300-l"]) == int(ExitCode.CONFIG)
    assert "did you mean 'b300-1'?" in capsys.readouterr().err


def test_an_unknown_patch_is_a_usage_error_naming_real_places(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # no ./playbooks/patches here
    assert main(["patch", "apply", "ddtestbed-custom-mas", "--host", "testbed"]) == \
        int(ExitCode.CONFIG)
    err = capsys.readouterr().err
    assert "did you mean 'ddtestbed-custom-mask'?" in err
    dirs = re.search(r" in (.+)\)$", err.strip()).group(1).split(", ")  # type: ignore[union-attr]
    assert dirs and all(Path(d).is_dir() for d in dirs), dirs
    assert "playbooks/patches" not in err


@pytest.mark.ssh
def test_a_noop_apply_prints_no_diff(sshd: object, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    site = Site(sshd, tmp_path)
    inv = write_inventory(tmp_path, site)
    g = ["-i", str(inv), "--ssh-config", str(sshd.ssh_config)]  # type: ignore[attr-defined]
    assert main([*g, "patch", "apply", "ddtestbed-custom-mask", "--host", "gpu"]) == 0
    first = capsys.readouterr()
    assert "@@" in first.out  # the change itself is shown once
    assert main([*g, "patch", "apply", "ddtestbed-custom-mask", "--host", "gpu"]) == 0
    again = capsys.readouterr()
    assert "@@" not in again.out + again.err and "already applied" in again.err
    assert main([*g, "patch", "revert", "ddtestbed-custom-mask", "--host", "gpu"]) == 0


@pytest.mark.ssh
def test_hosts_check_says_host_key_and_auth(sshd: object, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)  # no agent keys to fall back on
    s = sshd
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host authfail\n  HostName 127.0.0.1\n  Port {s.port}\n  User {s.user}\n"  # type: ignore[attr-defined]
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {s.known_hosts}\n"  # type: ignore[attr-defined]
        f"  GlobalKnownHostsFile /dev/null\n"
        f"Host keyfail\n  HostName 127.0.0.1\n  Port {s.port}\n  User {s.user}\n"  # type: ignore[attr-defined]
        f"  IdentityFile {s.key}\n  IdentitiesOnly yes\n"  # type: ignore[attr-defined]
        f"  UserKnownHostsFile {tmp_path / 'empty_known_hosts'}\n"
        f"  GlobalKnownHostsFile /dev/null\n")
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  authfail:\n    host: authfail\n    python: {sys.executable}\n"
                   f"    identity_file: {tmp_path / 'no-such-key'}\n"
                   f"  keyfail:\n    host: keyfail\n    python: {sys.executable}\n")
    code = main(["-i", str(inv), "--ssh-config", str(cfg), "hosts", "--check", "--json",
                 "--host", "authfail,keyfail"])
    rows = {h["name"]: h for h in json.loads(capsys.readouterr().out)["hosts"]}
    assert code == int(ExitCode.UNREACHABLE)
    assert rows["keyfail"]["status"] == "host key", rows["keyfail"]
    assert "fingerprint is SHA256:" in rows["keyfail"]["error"]
    assert rows["authfail"]["status"] == "auth", rows["authfail"]
    assert f"identity_file {tmp_path / 'no-such-key'} of host 'authfail' does not exist" in \
        rows["authfail"]["error"]


@pytest.mark.ssh
def test_probe_after_the_server_died_says_it_is_down(sshd: object, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import os
    import signal
    import time

    from server_util import procs_with
    site = Site(sshd, tmp_path, scenario="healthy")
    inv = write_inventory(tmp_path, site)
    g = ["-i", str(inv), "--ssh-config", str(sshd.ssh_config)]  # type: ignore[attr-defined]
    assert main([*g, "server", "start", "--host", "gpu", "--budget", "8"]) == 0
    pids = procs_with(f"--port\x00{site.port}\x00")
    assert pids
    for pid in pids:  # the server dies (OOM killer, a crash after start)
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while procs_with(f"--port\x00{site.port}\x00") and time.monotonic() < deadline:
        time.sleep(0.2)
    capsys.readouterr()
    code = main([*g, "probe", "--host", "gpu", "--tasks", "2", "--timeout", "20"])
    err = capsys.readouterr().err
    assert code == int(ExitCode.SERVER), err
    assert "gpu: the server is not running" in err and "ddprobe server logs --host gpu" in err
    assert "ReadError" not in err and "ConnectError" not in err


LOGS = Path(__file__).parent / "data" / "logs"


def test_classify_of_an_acceptance_collapse_is_suspect(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    # a real log (fastrl #4): no failure signature, accept len 1.00 on every decode line
    collapse = str(LOGS / "fastrl-4-decode-accept-1.00.log")
    assert main(["classify", collapse]) == 0
    out = capsys.readouterr().out
    assert out.startswith("outcome: suspect") and "ddprobe probe" in out, out
    assert main(["classify", collapse, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["outcome"] == "ok" and "acceptance collapsed" in doc["suspect"]
    healthy = str(LOGS / "sglang-11830-healthy-startup.log")
    assert main(["classify", healthy]) == 0
    out = capsys.readouterr().out
    assert out.startswith("outcome: ok") and "suspect" not in out
