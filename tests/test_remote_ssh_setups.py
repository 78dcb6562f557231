"""Real SSH setups over the real sshd fixtures (issue 15.4): host certificates signed by a CA in
known_hosts (`@cert-authority`), `@revoked` keys, ProxyCommand, HostKeyAlias and
StrictHostKeyChecking no, each checked as OpenSSH checks it."""
from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import paramiko
import pytest

from ddprobe import remote
from ddprobe.errors import HostKeyError
from ddprobe.inventory import Host
from ddprobe.remote.keytrust import cert_problem, parse_cert


def _keygen(p: Path, typ: str = "ed25519") -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", typ, "-N", "", "-f", str(p)], check=True)
    return " ".join(p.with_suffix(".pub").read_text().split()[:2])


def _sign(ca: Path, pub: Path, *, principals: str = "127.0.0.1", host: bool = True,
          validity: str | None = None, ident: str = "gpu-cert") -> Path:
    argv = ["ssh-keygen", "-q", "-s", str(ca), "-I", ident, "-n", principals]
    argv += ["-h"] if host else []
    argv += ["-V", validity] if validity else []
    subprocess.run(argv + [str(pub)], check=True, capture_output=True)
    return pub.with_name(pub.name.removesuffix(".pub") + "-cert.pub")


@pytest.fixture(scope="module")
def cert_sshd(sshd_factory: Callable[..., object], tmp_path_factory: pytest.TempPathFactory):
    """An sshd whose ECDSA host key carries a host certificate signed by a CA (ssh-keygen -s CA
    -h), beside its plain ed25519 key; returns the server and the CA's public key line."""
    made: dict[str, str] = {}

    def setup(d: Path) -> str:
        made["ca"] = _keygen(d / "ca")
        _keygen(d / "host_ecdsa", "ecdsa")
        cert = _sign(d / "ca", d / "host_ecdsa.pub")
        return f"HostKey {d}/host_ecdsa\nHostCertificate {cert}\n"
    server = sshd_factory("cert", setup=setup)
    return server, made["ca"]


def _cfg(tmp_path: Path, server, kh: Path, extra: str = "", name: str = "h") -> Path:
    cfg = tmp_path / "cfg"
    cfg.write_text(f"Host {name}\n  HostName 127.0.0.1\n  Port {server.port}\n"
                   f"  User {server.user}\n  IdentityFile {server.key}\n  IdentitiesOnly yes\n"
                   f"  UserKnownHostsFile {kh}\n  GlobalKnownHostsFile /dev/null\n{extra}")
    return cfg


def _connect(cfg: Path, name: str = "h", **kw) -> remote.Remote:
    return remote.connect(Host(name=name, host=name),
                          remote.RemoteOptions(ssh_config=str(cfg), **kw))


def test_host_certificate_signed_by_a_known_ca_is_accepted(cert_sshd, tmp_path):
    server, ca = cert_sshd
    kh = tmp_path / "known_hosts"
    kh.write_text(f"# only the CA is known, no host key\n@cert-authority [127.0.0.1]:* {ca}\n")
    before = kh.read_text()
    with _connect(_cfg(tmp_path, server, kh)) as r:
        assert r.run(["echo", "via-cert"]).stdout == "via-cert\n"
        key = r._conn.transport.get_remote_server_key()  # type: ignore[attr-defined]
        assert key.public_blob.key_type.endswith("-cert-v01@openssh.com")
    assert kh.read_text() == before  # a certificate is never recorded as a host key


def test_certificate_of_another_ca_falls_back_to_the_plain_key(cert_sshd, tmp_path):
    server, _ = cert_sshd
    other = _keygen(tmp_path / "other_ca")
    kh = tmp_path / "known_hosts"
    kh.write_text(f"@cert-authority [127.0.0.1]:* {other}\n")
    with pytest.raises(HostKeyError) as ei:
        _connect(_cfg(tmp_path, server, kh))
    msg = str(ei.value)
    assert "unknown host key" in msg and "not listed as @cert-authority" in msg


def test_host_key_alias_is_the_name_principals_and_lookups_use(cert_sshd, tmp_path):
    server, ca = cert_sshd
    kh = tmp_path / "known_hosts"
    # the CA is listed for the alias; the certificate names 127.0.0.1, not the alias
    kh.write_text(f"@cert-authority gpu-alias {ca}\n")
    with pytest.raises(HostKeyError) as ei:
        _connect(_cfg(tmp_path, server, kh, "  HostKeyAlias gpu-alias\n"))
    assert "'gpu-alias' is not among its principals (127.0.0.1)" in str(ei.value)


def test_certificate_checks_as_openssh_does(tmp_path):
    """Validity, certificate type and principals, on real ssh-keygen certificates."""
    _keygen(tmp_path / "ca")
    _keygen(tmp_path / "hk")
    typ, b64 = (tmp_path / "ca.pub").read_text().split()[:2]
    ca = paramiko.PKey.from_type_string(typ, base64.b64decode(b64))

    def blob(**kw) -> bytes:
        cert = _sign(tmp_path / "ca", tmp_path / "hk.pub", **kw)
        return paramiko.PublicBlob.from_file(str(cert)).key_blob

    good = parse_cert(blob(principals="gpu1,gpu2"))
    assert good.key_id == "gpu-cert" and good.principals == ("gpu1", "gpu2")
    assert cert_problem(good, "gpu2", [ca]) is None
    assert "not among its principals" in (cert_problem(good, "gpu3", [ca]) or "")
    assert "not listed as @cert-authority" in (cert_problem(good, "gpu1", []) or "")
    assert cert_problem(parse_cert(blob(validity="20200101:20200102")), "127.0.0.1",
                        [ca]) == "expired"
    assert cert_problem(parse_cert(blob(validity="+3650d:+3700d")), "127.0.0.1",
                        [ca]) == "not yet valid"
    assert cert_problem(parse_cert(blob(host=False)), "127.0.0.1",
                        [ca]) == "not a host certificate"
    # a flipped byte in the signed part: the CA's signature no longer verifies
    raw = bytearray(blob())
    raw[-200] ^= 1
    bad = parse_cert(bytes(raw))
    assert cert_problem(bad, "127.0.0.1", [bad.ca]) == "its signature does not verify"


def test_marker_lines_never_break_a_connection(sshd, tmp_path):
    """known_hosts with @cert-authority and @revoked lines (paramiko's loader failed on them:
    'InvalidHostKey ... Incorrect padding') still connects through the plain line."""
    ca = _keygen(tmp_path / "ca")
    old = _keygen(tmp_path / "old")
    kh = tmp_path / "known_hosts"
    kh.write_text(f"@cert-authority *.example.com {ca}\n@revoked * {old}\n"
                  f"garbage line\n" + sshd.known_hosts.read_text())
    with _connect(_cfg(tmp_path, sshd, kh)) as r:
        assert r.run(["true"]).ok


def test_revoked_host_key_is_refused_even_when_listed(sshd, tmp_path):
    typ, b64 = sshd.known_hosts.read_text().split()[1:3]
    kh = tmp_path / "known_hosts"
    kh.write_text(sshd.known_hosts.read_text() + f"@revoked * {typ} {b64}\n")
    for accept in (False, True):
        with pytest.raises(HostKeyError) as ei:
            _connect(_cfg(tmp_path, sshd, kh), accept_new_host_keys=accept)
        assert "REVOKED" in str(ei.value) and f"{kh}:2" in str(ei.value)


def test_revoked_ca_refuses_its_certificates(cert_sshd, tmp_path):
    server, ca = cert_sshd
    kh = tmp_path / "known_hosts"
    kh.write_text(f"@cert-authority [127.0.0.1]:* {ca}\n@revoked * {ca}\n")
    with pytest.raises(HostKeyError) as ei:
        _connect(_cfg(tmp_path, server, kh))
    assert "certificate authority of the host key" in str(ei.value)
    assert "REVOKED" in str(ei.value)


def test_proxycommand_through_a_bastion(sshd, sshd2, tmp_path):
    """ProxyCommand as ssh -G resolves it (%h %p %r expanded): ssh -W through the first sshd
    reaches the second."""
    kh = tmp_path / "known_hosts"
    kh.write_text(sshd2.known_hosts.read_text())
    proxy = f"  ProxyCommand ssh -F {sshd.ssh_config} -W %h:%p {sshd.alias}\n"
    logins = sshd.log.read_text().count("Accepted publickey")
    with _connect(_cfg(tmp_path, sshd2, kh, proxy, name="behind"), name="behind") as r:
        assert r.run(["sh", "-c", "echo $SSH_CONNECTION"]).stdout.split()[2] == "127.0.0.1"
        assert r.run(["echo", "hi"]).stdout == "hi\n"
    # the bastion saw one more login: the one ssh -W made
    assert sshd.log.read_text().count("Accepted publickey") == logins + 1


def test_proxycommand_tokens_expanded(sshd, tmp_path):
    from ddprobe.remote.sshconfig import resolve
    kh = tmp_path / "known_hosts"
    cfg = _cfg(tmp_path, sshd, kh, "  ProxyCommand nc %h %p # %r 100%%\n")
    t = resolve("h", config_file=str(cfg))
    assert t.proxy_command == f"nc 127.0.0.1 {sshd.port} # {sshd.user} 100%"


def test_host_key_alias_looks_up_and_records_under_the_alias(sshd, tmp_path):
    typ, b64 = sshd.known_hosts.read_text().split()[1:3]
    kh = tmp_path / "known_hosts"
    kh.write_text(f"gpu-alias {typ} {b64}\n")
    alias = "  HostKeyAlias gpu-alias\n"
    with _connect(_cfg(tmp_path, sshd, kh, alias)) as r:
        assert r.run(["true"]).ok
    # without the alias the same file does not know the host
    with pytest.raises(HostKeyError):
        _connect(_cfg(tmp_path, sshd, kh))
    kh2 = tmp_path / "known_hosts2"
    with _connect(_cfg(tmp_path, sshd, kh2, alias), accept_new_host_keys=True) as r:
        assert r.run(["true"]).ok
    assert kh2.read_text().split()[0] == "gpu-alias"


def test_strict_host_key_checking_no_records_a_new_key_and_says_so(sshd, tmp_path, capfd):
    kh = tmp_path / "known_hosts"
    with _connect(_cfg(tmp_path, sshd, kh, "  StrictHostKeyChecking no\n")) as r:
        assert r.run(["true"]).ok
    err = capfd.readouterr().err
    assert "Permanently added" in err and f"[127.0.0.1]:{sshd.port}" in err
    assert kh.read_text().split()[0] == f"[127.0.0.1]:{sshd.port}"
    # recorded: the next connection with the strict default knows the host
    with _connect(_cfg(tmp_path, sshd, kh)) as r:
        assert r.run(["true"]).ok
    assert "Permanently added" not in capfd.readouterr().err


def test_strict_host_key_checking_no_connects_to_a_changed_key_without_forwarding(
        sshd, tmp_path, capfd):
    """ssh_config(5): 'no' lets a changed key connect, with a warning, without recording it,
    and with port forwarding disabled."""
    other = _keygen(tmp_path / "other")
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd.port} {other}\n")
    with _connect(_cfg(tmp_path, sshd, kh, "  StrictHostKeyChecking no\n")) as r:
        assert r.run(["echo", "ok"]).stdout == "ok\n"
        with pytest.raises(HostKeyError) as ei, r.tunnel(22):
            pass
        assert "port forwarding is disabled" in str(ei.value)
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in capfd.readouterr().err
    assert kh.read_text() == f"[127.0.0.1]:{sshd.port} {other}\n"


def test_a_refused_host_key_leaves_no_proxycommand_behind(sshd, sshd2, tmp_path):
    from server_util import procs_with
    mark = f"DDPROBE_PROXY_MARK={tmp_path.name}"
    kh = tmp_path / "known_hosts"  # empty: sshd2's key is unknown and refused
    proxy = f"  ProxyCommand env {mark} ssh -F {sshd.ssh_config} -W %h:%p {sshd.alias}\n"
    with pytest.raises(HostKeyError):
        _connect(_cfg(tmp_path, sshd2, kh, proxy, name="behind"), name="behind")
    deadline = time.monotonic() + 10
    while procs_with(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not procs_with(mark)
