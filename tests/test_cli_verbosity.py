"""-v / -vv / -vvv (Ansible's convention): -v the commands run on hosts, -vv every ddprobe
debug log, -vvv the SSH protocol (paramiko) too. Real: the built-in local host and a loopback
sshd. Expected before running: each level shows its layer and not the next one's."""
from __future__ import annotations

from pathlib import Path

import pytest

from ddprobe.cli import main


def test_v_shows_the_commands_run_on_the_host(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["facts", "--host", "testbed", "--json"]) == 0
    assert "running" not in capsys.readouterr().err
    assert main(["-v", "facts", "--host", "testbed", "--json"]) == 0
    err = capsys.readouterr().err
    assert "ddprobe.remote: local: running" in err


@pytest.mark.ssh
def test_vvv_adds_the_ssh_protocol(sshd: object, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  h: {{host: {sshd.alias}}}\n")  # type: ignore[attr-defined]
    base = ["-i", str(inv), "--ssh-config", str(sshd.ssh_config)]  # type: ignore[attr-defined]
    assert main([*base, "-v", "hosts", "--check"]) == 0
    err = capsys.readouterr().err
    assert "paramiko" not in err
    assert main([*base, "-vvv", "hosts", "--check"]) == 0
    err = capsys.readouterr().err
    assert "paramiko.transport:" in err


def test_v_is_one_line_per_command_and_vvv_adds_the_programs(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-v", "facts", "--host", "testbed", "--json"]) == 0
    lines = capsys.readouterr().err.splitlines()
    running = [ln for ln in lines if ": running " in ln]
    # the shipped host program is named by its size and digest, not dumped (issue 24.11)
    assert running and len(lines) == len(running), lines[:5]
    assert any("<program: " in ln and " lines, sha256 " in ln for ln in running)
    assert main(["-vvv", "facts", "--host", "testbed", "--json"]) == 0
    err = capsys.readouterr().err
    assert "ddprobe-programs: local: program sha256 " in err and "\ndef " in err
