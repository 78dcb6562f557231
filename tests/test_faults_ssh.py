"""Real SSH setups (issue 15.4): a login shell that prints, host certificates and revoked keys
in known_hosts, ProxyCommand and HostKeyAlias, StrictHostKeyChecking no, a missing
interpreter at the host's python path. All over real OpenSSH sshd servers on loopback.

Expected (written first):
- on a host whose rc file prints on stdout and stderr (and a JSON line that looks like the
  agent's), every command's stdout/stderr is exactly the command's, with the agent and with
  one exec channel per command; files read and write; `hosts --check` is ok there and is NOT
  ok (exit 4, an error naming the failed command) where commands cannot run.
"""
from __future__ import annotations

import json
import os
import pwd
import sys
from pathlib import Path

import pytest

from ddprobe import remote
from ddprobe.cli import main
from ddprobe.inventory import Host

pytestmark = pytest.mark.ssh


def _opts(server, **kw) -> remote.RemoteOptions:
    return remote.RemoteOptions(ssh_config=str(server.ssh_config), **kw)


@pytest.mark.parametrize("agent", [True, False], ids=["agent", "exec-channel"])
def test_a_printing_login_shell_never_reaches_command_output(sshd_noisy, tmp_path: Path,
                                                            agent: bool) -> None:
    h = Host(name="noisy", host=sshd_noisy.alias, python=sys.executable, source="test")
    with remote.connect(h, _opts(sshd_noisy, agent=agent)) as r:
        res = r.run(["sh", "-c", "echo out; echo err >&2"])
        assert (res.stdout, res.stderr, res.exit_code) == ("out\n", "err\n", 0)
        doc = json.loads(r.python(["-c", "import json,sys; print(json.dumps(sys.argv[1:]))",
                                   "a b", "{\"ready\": 1}"], check=True).stdout)
        assert doc == ["a b", "{\"ready\": 1}"]
        assert r.run(["cat"], input="through stdin").stdout == "through stdin"
        f = tmp_path / f"file-{agent}"
        r.write_bytes(str(f), b"written\x00bytes")
        assert f.read_bytes() == b"written\x00bytes"
        assert r.read_bytes(str(f)) == b"written\x00bytes"
        # `~` is the login's $HOME on the host (the test sshd sets its own), whatever this
        # process's $HOME or the account's passwd entry says
        assert r.home == str(sshd_noisy.home)
        assert r.home not in (os.environ.get("HOME"), pwd.getpwuid(os.getuid()).pw_dir)


def _inv(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "hosts.yaml"
    p.write_text(text)
    return p


def test_hosts_check_runs_a_command(sshd_noisy, sshd_factory, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    # a bastion-like account: ssh authenticates, every command is refused
    nologin = sshd_factory("nologin", extra="ForceCommand echo 'This account is currently "
                                             "not available.'; exit 1\n")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(sshd_noisy.ssh_config.read_text().split("Host *")[0]
                   + nologin.ssh_config.read_text())
    inv = _inv(tmp_path, f"hosts:\n  noisy: {{host: gpu-noisy, python: {sys.executable}}}\n"
                         f"  nologin: {{host: gpu-nologin, python: {sys.executable}}}\n")
    code = main(["-i", str(inv), "--ssh-config", str(cfg), "hosts", "--check", "--json"])
    doc = json.loads(capsys.readouterr().out)
    st = {h["name"]: h for h in doc["hosts"]}
    assert st["noisy"]["status"] == "ok", st["noisy"]
    assert st["noisy"]["python_version"] == "%d.%d.%d" % sys.version_info[:3]
    assert st["nologin"]["status"] != "ok"
    assert "command failed (exit 1)" in st["nologin"]["error"]
    assert code == 4


def test_missing_interpreter_is_a_config_error_naming_the_key(sshd, tmp_path: Path,
                                                              capsys) -> None:
    inv = _inv(tmp_path, f"hosts:\n  gpu-a:\n    host: {sshd.alias}\n"
                         f"    python: /nonexistent/bin/python3\n")
    for args in (["facts", "--host", "gpu-a"], ["hosts", "--check", "--host", "gpu-a", "--json"],
                 ["grep", "x", "--host", "gpu-a"]):
        code = main(["-i", str(inv), "--ssh-config", str(sshd.ssh_config), *args])
        out, err = capsys.readouterr()
        err = " ".join((out + err).split())  # the hosts table wraps its error column
        assert code == 3, (args, err)
        assert "/nonexistent/bin/python3" in err and "key 'python'" in err, err
        assert "Traceback" not in err
    code = main(["-i", str(inv), "--ssh-config", str(sshd.ssh_config), "facts",
                 "--host", "gpu-a"])
    assert f"{inv}:" in capsys.readouterr().err  # where the host is defined
