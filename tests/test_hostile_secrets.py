"""Secrets on the host (issue 14 item 6) and environment variable names (item 3).

Expected answers, written before the runs: after `ddprobe run --env K=<secret>` through a real
sshd host, the secret is in the server process's environment (it was passed) and in no file
ddprobe wrote, on the host (lock, server.json, last.json, logs) or locally (journal, reports,
`--json` output, `server status`); the host state files are 0600. A name that `env(1)` would
read as an option (`-S...`) or that holds `=` is refused with exit 3 before any host is
touched, from `--env` and from an inventory (file:line).
"""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from conftest import SshServer
from server_util import CliHost, procs_with

from ddprobe.cli import main
from ddprobe.errors import ConfigError
from ddprobe.exitcodes import ExitCode
from ddprobe.remote import build_command

SECRET = "s3cr3t-hf_AbCdEf0123456789"


def _files_with(root: Path, needle: str) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            try:
                if needle.encode() in p.read_bytes():
                    hits.append(str(p))
            except OSError:
                pass
    return hits


@pytest.mark.ssh
def test_env_values_are_never_written(sshd: SshServer, tb_prefix: Path,
                                      tmp_path: Path, capsys) -> None:
    runs = Path(os.environ.get("DDPROBE_RUNS", "runs"))
    before = set(runs.glob("*")) if runs.is_dir() else set()
    h = CliHost(sshd, tb_prefix, tmp_path)
    try:
        code, doc = h.run(capsys, "--budget", "8", "--env", f"DDPROBE_T_SECRET={SECRET}")
        assert code == ExitCode.OK, doc
        assert procs_with(SECRET), "the server did not get the variable"
        assert SECRET not in str(doc) and "DDPROBE_T_SECRET" in str(doc)
        assert main(["-i", str(h.inv), "--ssh-config", str(sshd.ssh_config), "server",
                     "status", "-H", "gpu", "--json"]) == 0
        status = capsys.readouterr().out
        assert SECRET not in status
        state = h.workdir / "server.json"
        assert stat.S_IMODE(state.stat().st_mode) == 0o600
        assert "DDPROBE_T_SECRET" in state.read_text()
    finally:
        h.stop()
    assert (h.workdir / "last.json").exists()
    assert stat.S_IMODE((h.workdir / "last.json").stat().st_mode) == 0o600
    assert _files_with(h.workdir, SECRET) == []
    new = (set(runs.glob("*")) if runs.is_dir() else set()) - before
    for d in new:
        assert _files_with(d, SECRET) == []


def test_lock_command_is_redacted() -> None:
    # the command line of a real process, as the lock would record it
    import subprocess
    argv = ["run", "--env", f"K={SECRET}", f"--env=L={SECRET}", "--api-key", SECRET,
            "--budget", "8"]
    proc = subprocess.run([sys.executable, "-c", "from ddprobe.server.lock import "
                           "default_command; print(default_command())", *argv],
                          capture_output=True, text=True, check=True, timeout=60)
    cmd = proc.stdout.strip()
    assert SECRET not in cmd and "K=***" in cmd and "L=***" in cmd and "--budget 8" in cmd


@pytest.mark.parametrize("name", ["-S", "-Secho pwned", "A=B", "A B", "1A", "", "A\x00B",
                                  "--", "-i"])
def test_bad_env_names_never_reach_a_host(name: str) -> None:
    with pytest.raises(ConfigError):
        build_command(["true"], env={name: "v"})


def test_bad_env_name_from_the_cli(tmp_path: Path, capsys) -> None:
    code = main(["run", "-H", "testbed", "--budget", "8", "--env", "-Secho pwned=1"])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE and "not a valid environment variable name" in err


def test_bad_env_name_in_the_inventory(tmp_path: Path, capsys) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts:\n  gpu:\n    host: 127.0.0.1\n    env:\n      OK: '1'\n"
                   "      'X=Y': '2'\n")
    code = main(["-i", str(inv), "facts", "-H", "gpu"])
    err = capsys.readouterr().err
    assert code == ExitCode.CONFIG and f"{inv}:6" in err and "X=Y" in err
