"""The remote layer against a real OpenSSH sshd on loopback."""
from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddprobe import remote
from ddprobe.errors import HostKeyError, RemoteCommandError, RemoteTimeout, UnreachableError
from ddprobe.inventory import Host

pytestmark = pytest.mark.ssh


@pytest.fixture(scope="module")
def conn(sshd):  # one reused connection for the quoting property test
    from ddprobe.remote import RemoteOptions, SshRemote
    h = Host(name="gpu-a", host=sshd.alias)
    r = SshRemote(h, RemoteOptions(ssh_config=str(sshd.ssh_config))).connect()
    yield r
    r.close()


def test_exit_code_streams_and_duration(ssh_opts, make_host):
    with remote.connect(make_host(), ssh_opts) as r:
        res = r.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (res.exit_code, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert res.duration > 0 and not res.ok


def test_check_raises_with_host_and_tail(ssh_opts, make_host):
    with remote.connect(make_host(), ssh_opts) as r, pytest.raises(RemoteCommandError) as ei:
        r.run(["sh", "-c", "echo boom >&2; exit 7"], check=True)
    assert "gpu-a" in str(ei.value) and "exit 7" in str(ei.value) and "boom" in str(ei.value)


def test_one_connection_is_reused(ssh_opts, make_host, sshd):
    before = sshd.log.read_text().count("Accepted publickey")
    with remote.connect(make_host(), ssh_opts) as r:
        for _ in range(10):
            assert r.run(["true"]).ok
    after = sshd.log.read_text().count("Accepted publickey")
    assert after - before == 1


def test_stdin_env_cwd(ssh_opts, make_host, tmp_path):
    with remote.connect(make_host(), ssh_opts) as r:
        assert r.run(["cat"], input="hello\nworld").stdout == "hello\nworld"
        big = "x" * 3_000_000
        assert r.run(["wc", "-c"], input=big).stdout.strip() == str(len(big))
        assert r.run(["sh", "-c", 'printf %s "$FOO"'], env={"FOO": "a b;$(x)"}).stdout == "a b;$(x)"
        assert r.run(["pwd"], cwd=str(tmp_path)).stdout.strip() == str(tmp_path)
        missing = r.run(["pwd"], cwd=str(tmp_path / "nope"))
        assert missing.exit_code == 125


def test_python_uses_host_interpreter_and_env(ssh_opts, make_host):
    h = make_host(env={"DDPROBE_X": "42"})
    with remote.connect(h, ssh_opts) as r:
        res = r.python(["-c", "import os, sys; print(sys.executable, os.environ['DDPROBE_X'])"])
    assert res.ok and res.stdout.split() == [h.python, "42"]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=60)
       | st.sampled_from(["'", '"', ";", "$(touch CANARY)", "`touch CANARY`", "a\nb", "\\",
                          "$HOME", "*", "-n", "--", "&& touch CANARY", "| touch CANARY"]))
def test_quoting_any_string_round_trips(conn, tmp_path_factory, s):
    d = tmp_path_factory.getbasetemp() / "quoting"
    d.mkdir(exist_ok=True)
    res = conn.run(["printf", "%s", s], cwd=str(d))
    assert res.ok, res.stderr
    assert res.stdout == s
    assert not (d / "CANARY").exists()
    assert not (Path.home() / "CANARY").exists()


def test_command_timeout(ssh_opts, make_host):
    with remote.connect(make_host(), ssh_opts) as r:
        t0 = time.monotonic()
        with pytest.raises(RemoteTimeout):
            r.run(["sleep", "30"], timeout=1)
        # generous for a loaded machine; waiting for `sleep 30` itself would take 30 s
        assert time.monotonic() - t0 < 20
        assert r.run(["echo", "still-alive"]).stdout == "still-alive\n"


def test_host_down_is_unreachable(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = tmp_path / "cfg"
    cfg.write_text(f"Host down\n  HostName 127.0.0.1\n  Port {port}\n")
    h = Host(name="down", host="down")
    t0 = time.monotonic()
    with pytest.raises(UnreachableError) as ei:
        remote.connect(h, remote.RemoteOptions(ssh_config=str(cfg), connect_timeout=3))
    # a refused port fails at once; 20 s (generous for a loaded machine) is still well under
    # what a connect that ignored connect_timeout=3 or retried would take
    assert "down" in str(ei.value) and time.monotonic() - t0 < 20


def test_unknown_host_key_refused_then_accepted(sshd, tmp_path, capfd):
    kh = tmp_path / "known_hosts"
    cfg = tmp_path / "cfg"
    cfg.write_text(f"Host fresh\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
                   f"  IdentityFile {sshd.key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {kh}\n"
                   f"  GlobalKnownHostsFile /dev/null\n")
    h = Host(name="fresh", host="fresh")
    with pytest.raises(HostKeyError) as ei:
        remote.connect(h, remote.RemoteOptions(ssh_config=str(cfg)))
    assert "--accept-new-host-keys" in str(ei.value)
    # the fingerprint ssh itself prints for the server's key (issue 24.10)
    fp = subprocess.run(["ssh-keygen", "-lf", str(sshd.dir / "host_ed25519.pub")],
                        capture_output=True, text=True, check=True).stdout.split()[1]
    assert fp.startswith("SHA256:") and f"ssh-ed25519 key fingerprint is {fp}" in str(ei.value)
    assert not kh.exists() or kh.read_text() == ""
    with remote.connect(h, remote.RemoteOptions(ssh_config=str(cfg),
                                                 accept_new_host_keys=True)) as r:
        assert r.run(["true"]).ok
    assert f"[127.0.0.1]:{sshd.port}" in kh.read_text()
    err = capfd.readouterr().err  # recorded as ssh says it, not silently
    assert f"Warning: Permanently added '[127.0.0.1]:{sshd.port}' (ssh-ed25519 {fp})" in err
    # now known: the strict default connects
    with remote.connect(h, remote.RemoteOptions(ssh_config=str(cfg))) as r:
        assert r.run(["true"]).ok


def test_changed_host_key_refused_even_with_accept_new(sshd, tmp_path):
    import subprocess
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    typ, b64 = other.with_suffix(".pub").read_text().split()[:2]
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd.port} {typ} {b64}\n")
    cfg = tmp_path / "cfg"
    cfg.write_text(f"Host changed\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
                   f"  IdentityFile {sshd.key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {kh}\n"
                   f"  GlobalKnownHostsFile /dev/null\n")
    for accept in (False, True):
        with pytest.raises(HostKeyError) as ei:
            remote.connect(Host(name="changed", host="changed"),
                           remote.RemoteOptions(ssh_config=str(cfg), accept_new_host_keys=accept))
        assert "CHANGED" in str(ei.value)


def test_ssh_config_alias_user_port_identity_resolved_by_openssh(sshd):
    from ddprobe.remote.sshconfig import resolve
    t = resolve(sshd.alias, config_file=str(sshd.ssh_config))
    assert (t.hostname, t.port, t.user) == ("127.0.0.1", sshd.port, sshd.user)
    assert str(sshd.key) in t.identity_files and t.identities_only
    assert t.known_hosts_files[0] == str(sshd.known_hosts)
    assert t.server_alive_interval == 15 and t.resolved_by == "ssh -G"


def test_proxyjump_through_first_host(sshd, sshd2, tmp_path):
    cfg = tmp_path / "cfg"
    base = (f"  User {sshd.user}\n  IdentityFile {sshd.key}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {sshd.known_hosts} {sshd2.known_hosts}\n")
    cfg.write_text(f"Host jump\n  HostName 127.0.0.1\n  Port {sshd.port}\n{base}"
                   f"Host behind\n  HostName 127.0.0.1\n  Port {sshd2.port}\n  ProxyJump jump\n"
                   f"{base}")
    before = sshd.log.read_text().count("direct-tcpip")
    with remote.connect(Host(name="behind", host="behind"),
                        remote.RemoteOptions(ssh_config=str(cfg))) as r:
        assert r.run(["echo", "hi"]).stdout == "hi\n"
    assert sshd.log.read_text().count("direct-tcpip") > before or \
        "Connection from 127.0.0.1" in sshd2.log.read_text()


def test_files_roundtrip_atomic(ssh_opts, make_host, tmp_path):
    p = tmp_path / "f.bin"
    data = bytes(range(256)) * 100
    with remote.connect(make_host(), ssh_opts) as r:
        r.write_bytes(str(p), data, mode=0o640)
        assert r.read_bytes(str(p)) == data
        assert r.exists(str(p)) and not r.exists(str(tmp_path / "nope"))
    assert p.read_bytes() == data and oct(p.stat().st_mode & 0o777) == "0o640"
    assert not list(tmp_path.glob(".*ddprobe-tmp"))


def test_tunnel_reaches_a_port_on_the_host(ssh_opts, make_host):
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"through-the-tunnel")

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with remote.connect(make_host(), ssh_opts) as r, r.tunnel(srv.server_address[1]) as lp:
            assert lp != srv.server_address[1]
            for _ in range(3):
                body = urllib.request.urlopen(f"http://127.0.0.1:{lp}/", timeout=5).read()
                assert body == b"through-the-tunnel"
    finally:
        srv.shutdown()


def test_fan_out_reports_each_host(ssh_opts, make_host, sshd2, tmp_path):
    down = Host(name="down", host="127.0.0.1", port=1, user="x")
    hosts = [make_host("gpu-a"), make_host("gpu-b", server_=sshd2), down]

    def fn(h):
        with remote.connect(h, remote.RemoteOptions(ssh_config=ssh_opts.ssh_config,
                                                    connect_timeout=3)) as r:
            return r.run(["hostname"], check=True).stdout.strip()

    res = remote.fan_out(hosts, fn, max_workers=2, deadline=20)
    assert [o.status for o in res] == ["ok", "ok", "unreachable"]
    assert res[0].value and res[2].error

    slow = remote.fan_out([hosts[0]], lambda h: time.sleep(3), deadline=0.5)
    assert slow[0].status == "timeout"


@pytest.mark.parametrize("agent", [True, False], ids=["agent", "exec-channel"])
def test_timeout_kills_the_remote_process_group(ssh_opts, make_host, tmp_path, agent):
    pidfile = tmp_path / f"pid-{agent}"
    opts = remote.RemoteOptions(ssh_config=ssh_opts.ssh_config, agent=agent)
    with remote.connect(make_host(), opts) as r:
        with pytest.raises(RemoteTimeout):
            r.run(["sh", "-c", 'sleep 300 & echo $! > "$1"; wait', "sh", str(pidfile)],
                  timeout=1)
        assert r.run(["echo", "next"]).stdout == "next\n"  # the connection is still usable
    pid = int(pidfile.read_text())
    if agent:  # the agent kills the command's whole process group on the host
        for _ in range(50):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
        assert not Path(f"/proc/{pid}").exists()
    else:  # a plain exec channel cannot signal the remote group: ddprobe only stops waiting
        import os
        import signal
        os.kill(pid, signal.SIGKILL)


def test_agent_runs_argv_without_any_shell(ssh_opts, make_host, tmp_path):
    with remote.connect(make_host(), ssh_opts) as r:
        assert r._get_agent() is not None
        res = r.run(["printf", "%s|", "$(id)", "*", "a b"], cwd=str(tmp_path))
        assert res.stdout == "$(id)|*|a b|"
        assert r.run(["/no/such/binary"]).exit_code == 127


def test_debug_log_never_shows_environment_values(ssh_opts, make_host, caplog):
    import logging
    caplog.set_level(logging.DEBUG, logger="ddprobe.remote")
    for agent in (True, False):
        opts = remote.RemoteOptions(ssh_config=ssh_opts.ssh_config, agent=agent)
        with remote.connect(make_host(), opts) as r:
            assert r.run(["true"], env={"HF_TOKEN": "hf_secret_value"}).ok
    assert "HF_TOKEN" in caplog.text and "hf_secret_value" not in caplog.text


def test_local_commands_start_in_home_not_in_the_callers_checkout(tmp_path, monkeypatch):
    """`python -m PKG` puts its working directory first on sys.path: a local server started from
    a checkout holding a copy of the package (a clone of ddprobe holds ddtestbed/) imported that
    copy, not the install on PYTHONPATH that ddprobe analysed and patched. Local commands start in
    the home directory, as over SSH, so the install wins."""
    from ddprobe.inventory import builtin_testbed
    from ddprobe.remote.local import LocalRemote
    for where in ("checkout", "site"):
        pkg = tmp_path / where / "shadowpkg"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "__main__.py").write_text(f"import os\nprint('{where}', os.getcwd())\n")
    monkeypatch.chdir(tmp_path / "checkout")
    r = LocalRemote(builtin_testbed(), remote.RemoteOptions())
    res = r.run([sys.executable, "-m", "shadowpkg"], env={"PYTHONPATH": str(tmp_path / "site")})
    assert res.exit_code == 0, res.stderr
    where, cwd = res.stdout.split()
    assert where == "site" and Path(cwd) == Path.home()
    # an explicit cwd is still honoured
    res = r.run([sys.executable, "-c", "import os; print(os.getcwd())"], cwd=str(tmp_path))
    assert Path(res.stdout.strip()) == tmp_path
