"""Host keys as OpenSSH checks them: known_hosts files (plain, `@cert-authority` and `@revoked`
lines, hashed names, `!` negations), host certificates signed by a known CA, HostKeyAlias, and
StrictHostKeyChecking (yes/ask, accept-new, no) with the messages for a changed or unknown key.

paramiko's own loader stops at the first marker line (`InvalidHostKey ... Incorrect padding`)
and it never verifies a host certificate: ddprobe gives paramiko no host keys at all, so every
server key reaches `HostKeyPolicy.missing_host_key`, which decides as ssh(1) does.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko

from ddprobe.errors import HostKeyError
from ddprobe.remote.sshconfig import SshTarget

log = logging.getLogger("ddprobe.remote")

CERT_SUFFIX = "-cert-v01@openssh.com"
HOST_CERT = 2  # SSH2_CERT_TYPE_HOST


def known_host_name(t: SshTarget) -> str:
    """The name a host's keys are looked up and recorded under: HostKeyAlias verbatim (as ssh
    does), else the host name, bracketed with the port when it is not 22."""
    if t.host_key_alias:
        return t.host_key_alias
    return t.hostname if t.port == 22 else f"[{t.hostname}]:{t.port}"


@dataclass(frozen=True)
class KnownLine:
    marker: str  # "" | "@cert-authority" | "@revoked"
    patterns: str
    key: paramiko.PKey
    where: str  # path:line

    def matches(self, name: str) -> bool:
        return host_matches(self.patterns, name)


def host_matches(patterns: str, name: str) -> bool:
    """OpenSSH's host pattern list: comma-separated, `*`/`?` wildcards, `!` negates (a negated
    match wins), case-insensitive; a hashed entry `|1|salt|hash` is compared by HMAC-SHA1."""
    if patterns.startswith("|1|"):
        return _hashed_matches(patterns, name)
    hit = False
    for pat in patterns.lower().split(","):
        neg = pat.startswith("!")
        if _glob(pat[1:] if neg else pat).fullmatch(name.lower()):
            if neg:
                return False
            hit = True
    return hit


def _glob(pat: str) -> re.Pattern[str]:
    """Only `*` and `?` are special in ssh patterns (`[` is literal: `[host]:port`)."""
    return re.compile("".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch)
                              for ch in pat), re.DOTALL)


def _hashed_matches(entry: str, name: str) -> bool:
    try:
        _, _, salt, digest = entry.split("|")
        mac = hmac.new(base64.b64decode(salt), name.encode(), hashlib.sha1).digest()
        return hmac.compare_digest(mac, base64.b64decode(digest))
    except ValueError:
        return False


def parse_line(line: str, where: str) -> KnownLine | None:
    """One known_hosts line, or None for a comment, a blank or a line ddprobe cannot read (an
    unknown key type, bad base64): such a line is skipped as ssh skips it, never fatal."""
    fields = line.split()
    if not fields or fields[0].startswith("#"):
        return None
    marker = fields[0] if fields[0].startswith("@") else ""
    if marker:
        fields = fields[1:]
    if len(fields) < 3 or marker not in ("", "@cert-authority", "@revoked"):
        return None
    patterns, key_type, b64 = fields[:3]
    try:
        key = paramiko.PKey.from_type_string(key_type, base64.b64decode(b64, validate=True))
    except Exception as e:  # paramiko raises many types for a key it cannot read
        log.debug("known_hosts %s: skipped (%s)", where, e)
        return None
    return KnownLine(marker, patterns, key, where)


class KnownHosts:
    """Every readable line of the known_hosts files in use (the first one records new keys)."""

    def __init__(self, lines: Sequence[KnownLine], files: Sequence[str]) -> None:
        self.lines, self.files = list(lines), tuple(files)
        self.record_to = files[0]

    @classmethod
    def load(cls, files: Sequence[str]) -> KnownHosts:
        lines: list[KnownLine] = []
        for f in files:
            try:
                text = Path(f).read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                continue
            except OSError as e:
                log.warning("cannot read known_hosts %s: %s", f, e)
                continue
            for n, raw in enumerate(text.splitlines(), 1):
                kl = parse_line(raw, f"{f}:{n}")
                if kl is not None:
                    lines.append(kl)
        return cls(lines, files)

    def _for(self, marker: str, name: str) -> list[KnownLine]:
        return [kl for kl in self.lines if kl.marker == marker and kl.matches(name)]

    def keys(self, name: str) -> list[KnownLine]:
        return self._for("", name)

    def authorities(self, name: str) -> list[KnownLine]:
        return self._for("@cert-authority", name)

    def revoked(self, key: paramiko.PKey, name: str) -> KnownLine | None:
        return next((kl for kl in self._for("@revoked", name) if same_key(kl.key, key)), None)

    def key_order(self, name: str) -> tuple[str, ...]:
        """Host key algorithms to ask for first: certificates when a CA is known for the host,
        then the types of its known keys (as ssh orders HostKeyAlgorithms)."""
        known: list[str] = []
        for kl in self.keys(name):
            t = kl.key.get_name()
            known += ["rsa-sha2-512", "rsa-sha2-256"] if t == "ssh-rsa" else [t]
        certs = [t + CERT_SUFFIX for t in known or _PLAIN] if self.authorities(name) else []
        return tuple(dict.fromkeys(certs + known))

    def record(self, name: str, key: paramiko.PKey) -> None:
        Path(self.record_to).parent.mkdir(parents=True, exist_ok=True)
        with open(self.record_to, "a", encoding="utf-8") as fh:
            fh.write(f"{name} {key.get_name()} {key.get_base64()}\n")
        self.lines.append(KnownLine("", name, key, self.record_to))


_PLAIN = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
          "rsa-sha2-512", "rsa-sha2-256")


def same_key(a: paramiko.PKey, b: paramiko.PKey) -> bool:
    return a.get_name() == b.get_name() and a.asbytes() == b.asbytes()


# ----- host certificates (PROTOCOL.certkeys) -------------------------------------------------


@dataclass(frozen=True)
class HostCert:
    cert_type: int
    key_id: str
    serial: int
    principals: tuple[str, ...]
    valid_after: int
    valid_before: int
    critical: bytes
    ca: paramiko.PKey
    signed: bytes  # the certificate up to (not including) the signature
    signature: bytes


# the public key fields of each base type, skipped to reach the certificate's own fields
_KEY_FIELDS: dict[str, Callable[[paramiko.Message], Any]] = {
    "ssh-ed25519": lambda m: m.get_string(),
    "ssh-rsa": lambda m: (m.get_mpint(), m.get_mpint()),
    "ssh-dss": lambda m: (m.get_mpint(), m.get_mpint(), m.get_mpint(), m.get_mpint()),
    "ecdsa-sha2-nistp256": lambda m: (m.get_text(), m.get_string()),
    "ecdsa-sha2-nistp384": lambda m: (m.get_text(), m.get_string()),
    "ecdsa-sha2-nistp521": lambda m: (m.get_text(), m.get_string()),
}


def parse_cert(blob: bytes) -> HostCert:
    """An OpenSSH certificate: type, nonce, key, serial, type, key id, principals, validity,
    critical options, extensions, reserved, signature key, signature."""
    m = paramiko.Message(blob)
    base = m.get_text().removesuffix(CERT_SUFFIX)
    if base not in _KEY_FIELDS:
        raise ValueError(f"unsupported certificate key type {base}")
    m.get_string()  # nonce
    _KEY_FIELDS[base](m)
    serial, cert_type, key_id = m.get_int64(), m.get_int(), m.get_text()
    pm = paramiko.Message(m.get_string())
    principals: list[str] = []
    while pm.get_remainder():
        principals.append(pm.get_text())
    valid_after, valid_before = m.get_int64(), m.get_int64()
    critical = m.get_string()
    m.get_string()  # extensions (none are defined for host certificates)
    m.get_string()  # reserved
    sig_key = m.get_string()
    signed = blob[:m.packet.tell()]
    signature = m.get_string()
    ca = paramiko.PKey.from_type_string(paramiko.Message(sig_key).get_text(), sig_key)
    return HostCert(cert_type, key_id, serial, tuple(principals), valid_after, valid_before,
                    critical, ca, signed, signature)


def cert_problem(cert: HostCert, name: str, authorities: Iterable[paramiko.PKey],
                 now: float | None = None) -> str | None:
    """Why ssh would refuse this host certificate for `name`, or None when it is valid: signed
    by a listed CA, a host certificate, `name` among its principals (or none listed), inside its
    validity, no critical options (none are defined for host certificates)."""
    now = time.time() if now is None else now
    checks: list[tuple[bool, str]] = [
        (not any(same_key(cert.ca, a) for a in authorities),
         f"signed by a CA ({cert.ca.get_name()} {cert.ca.fingerprint}) not listed as "
         f"@cert-authority for {name}"),
        (not _signature_ok(cert), "its signature does not verify"),
        (cert.cert_type != HOST_CERT, "not a host certificate"),
        (bool(cert.principals) and name not in cert.principals,
         f"{name!r} is not among its principals ({', '.join(cert.principals)})"),
        (now < cert.valid_after, "not yet valid"),
        (now >= cert.valid_before, "expired"),
        (bool(cert.critical), "it carries critical options"),
    ]
    return next((why for bad, why in checks if bad), None)


def _signature_ok(cert: HostCert) -> bool:
    try:
        return bool(cert.ca.verify_ssh_sig(cert.signed, paramiko.Message(cert.signature)))
    except Exception:  # a malformed signature is a bad signature
        return False


def cert_of(key: paramiko.PKey) -> bytes | None:
    """The certificate blob the server presented with its key, if it presented one."""
    blob = key.public_blob
    if blob is not None and blob.key_type.endswith(CERT_SUFFIX):
        return bytes(blob.key_blob)
    return None


# ----- the decision ----------------------------------------------------------------------------


@dataclass(frozen=True)
class HostKeyCheck:
    """What to do with one server key (OpenSSH's check_host_key), set per connection."""
    known: KnownHosts
    name: str  # the known_hosts name: HostKeyAlias or [host]:port
    cert_name: str  # the name a host certificate's principals must list
    strict: str  # StrictHostKeyChecking: yes | ask | accept-new | no
    accept_new: bool  # --accept-new-host-keys
    label: str  # the inventory host, for messages
    where: str  # user@host:port, for messages


class HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """The one host-key decision; paramiko is given no keys, so it asks here for every key."""

    def __init__(self, check: HostKeyCheck) -> None:
        self.check = check
        self.key_changed = False  # accepted under StrictHostKeyChecking no: no tunnels

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        c = self.check
        self._refuse_revoked(key)
        cert_why = self._cert_verdict(key)
        if cert_why is None:
            log.debug("%s: host certificate accepted for %s", c.label, c.cert_name)
            return
        known = c.known.keys(c.name)
        if any(same_key(kl.key, key) for kl in known):
            return
        if known:
            self._changed(key, known[0])
        else:
            self._unknown(key, cert_why)

    def _refuse_revoked(self, key: paramiko.PKey) -> None:
        c = self.check
        cert = cert_of(key)
        keys = [key] + ([parse_cert(cert).ca] if cert is not None else [])
        for k in keys:
            kl = c.known.revoked(k, c.name)
            if kl is not None:
                what = "host key" if k is key else "certificate authority of the host key"
                raise HostKeyError(
                    f"{c.label}: the {what} of {c.where} ({k.get_name()} {k.fingerprint}) is "
                    f"REVOKED (@revoked in {kl.where}); refusing to connect")

    def _cert_verdict(self, key: paramiko.PKey) -> str | None:
        """None when the key is a valid certificate for this host, else why it is not ("" for
        a plain key); an invalid certificate falls back to its plain key, as in ssh."""
        blob = cert_of(key)
        if blob is None:
            return ""
        c = self.check
        try:
            why = cert_problem(parse_cert(blob), c.cert_name,
                               [kl.key for kl in c.known.authorities(c.name)])
        except Exception as e:  # a certificate ddprobe cannot parse is not valid
            why = f"unreadable certificate ({e})"
        if why:
            log.warning("%s: host certificate of %s invalid: %s", c.label, c.where, why)
        return why

    def _changed(self, key: paramiko.PKey, old: KnownLine) -> None:
        c = self.check
        if c.strict != "no":
            raise HostKeyError(
                f"{c.label}: HOST KEY CHANGED for {c.where} (got {key.get_name()} "
                f"{key.fingerprint}); refusing to connect. If the host was "
                f"rebuilt, remove its old entry from {old.where.rpartition(':')[0]} "
                f"(ssh-keygen -R '{c.name}') and retry with --accept-new-host-keys")
        # ssh with StrictHostKeyChecking no: warn, connect, record nothing, forward no ports
        self.key_changed = True
        _stderr(f"WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED for {c.name} ({c.label}): "
                f"got {key.get_name()} {key.fingerprint}, {old.where} has another key. "
                f"StrictHostKeyChecking no: connecting anyway; the key is not recorded and "
                f"port forwarding (the probe tunnel) is disabled, as ssh does.")

    def _unknown(self, key: paramiko.PKey, cert_why: str) -> None:
        c = self.check
        if c.accept_new or c.strict == "accept-new" or c.strict == "no":
            # as ssh says it, with the fingerprint of what was recorded
            c.known.record(c.name, key)
            why = "--accept-new-host-keys" if c.accept_new else f"StrictHostKeyChecking {c.strict}"
            _stderr(f"Warning: Permanently added '{c.name}' ({key.get_name()} {key.fingerprint}) "
                    f"to the list of known hosts {c.known.record_to} ({why}; {c.label})")
            return
        cert = f" (its host certificate is invalid: {cert_why})" if cert_why else ""
        raise HostKeyError(
            f"{c.label}: unknown host key for {c.where}{cert}: {key.get_name()} key "
            f"fingerprint is {key.fingerprint} (not in {', '.join(c.known.files)}); check it "
            f"(`ssh-keygen -lf /etc/ssh/ssh_host_{_keyfile(key)}_key.pub` on the host), then "
            f"re-run with --accept-new-host-keys to record it")


def _keyfile(key: paramiko.PKey) -> str:
    """The host key file's type word (`ssh_host_<type>_key`) for a key."""
    name = key.get_name()
    return "ed25519" if "ed25519" in name else "ecdsa" if "ecdsa" in name else \
        "rsa" if "rsa" in name else "*"


def _stderr(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def transport_factory(first: Sequence[str]) -> Callable[..., paramiko.Transport]:
    """A paramiko Transport that asks for these host key algorithms first (paramiko lists
    certificate types last and reorders only for keys it was given itself)."""
    order = tuple(first)

    class _Ordered(paramiko.Transport):
        @property
        def preferred_keys(self) -> tuple[str, ...]:
            base = tuple(super().preferred_keys)
            return tuple(k for k in order if k in base) + tuple(k for k in base
                                                                 if k not in order)

    def make(sock: Any, **kw: Any) -> paramiko.Transport:
        return _Ordered(sock, **kw)
    return make
