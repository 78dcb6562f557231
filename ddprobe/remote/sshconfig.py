"""Resolve how to reach a host: OpenSSH's own `ssh -G` where the client exists, paramiko's parser
as the fallback. Fabric alone ignores Include, IdentitiesOnly, StrictHostKeyChecking,
UserKnownHostsFile and ServerAliveInterval (fabric#2071, #1804, paramiko#1609)."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import paramiko

from ddprobe.errors import ConfigError


@dataclass(frozen=True)
class SshTarget:
    alias: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    identities_only: bool
    proxy_jump: str | None
    proxy_command: str | None  # as ssh runs it: %h %p %r %n %% expanded
    host_key_alias: str | None
    known_hosts_files: tuple[str, ...]  # user files first (new keys are recorded in the first)
    strict_host_key_checking: str  # yes | accept-new | no | ask
    server_alive_interval: int
    connect_timeout: float | None
    resolved_by: str  # "ssh -G" | "paramiko"


def _expand(p: str) -> str:
    return os.path.expanduser(os.path.expandvars(p))


def _ssh_g(alias: str, *, user: str | None, port: int | None, identity: str | None,
           config_file: str | None) -> dict[str, list[str]]:
    argv = ["ssh", "-G"]
    if config_file:
        argv += ["-F", config_file]
    if user:
        argv += ["-l", user]
    if port:
        argv += ["-p", str(port)]
    if identity:
        argv += ["-i", _expand(identity)]
    argv += ["--", alias]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=10,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        msg = (proc.stderr.strip().splitlines() or ["ssh -G failed"])[-1]
        raise ConfigError(f"cannot resolve host '{alias}' through ssh config: {msg}",
                          path=config_file)
    out: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        k, _, v = line.partition(" ")
        out.setdefault(k.lower(), []).append(v)
    return out


def _paramiko(alias: str, *, user: str | None, port: int | None, identity: str | None,
              config_file: str | None) -> dict[str, list[str]]:
    cfg = paramiko.SSHConfig()
    path = Path(_expand(config_file or "~/.ssh/config"))
    if path.is_file():
        cfg = paramiko.SSHConfig.from_path(str(path))
    d = cfg.lookup(alias)
    out: dict[str, list[str]] = {k.lower(): (v if isinstance(v, list) else [str(v)])
                                 for k, v in d.items()}
    if user:
        out["user"] = [user]
    if port:
        out["port"] = [str(port)]
    if identity:
        out["identityfile"] = [identity] + out.get("identityfile", [])
    return out


def resolve(alias: str, *, user: str | None = None, port: int | None = None,
            identity: str | None = None, config_file: str | None = None) -> SshTarget:
    """Resolve an inventory host (hostname or alias) with inventory overrides applied on top,
    the way `ssh -l USER -p PORT -i KEY alias` would."""
    if config_file and not Path(_expand(config_file)).is_file():
        raise ConfigError("ssh config file not found", path=config_file, key="--ssh-config")
    if shutil.which("ssh"):
        d, by = _ssh_g(alias, user=user, port=port, identity=identity,
                       config_file=_expand(config_file) if config_file else None), "ssh -G"
    else:
        d, by = _paramiko(alias, user=user, port=port, identity=identity,
                          config_file=config_file), "paramiko"

    def one(k: str, default: str = "") -> str:
        return (d.get(k) or [default])[0]

    kh: list[str] = []
    for k in ("userknownhostsfile", "globalknownhostsfile"):
        for v in d.get(k, []):
            kh += [_expand(x) for x in v.split()]
    if not kh:
        kh = [_expand("~/.ssh/known_hosts")]
    pj = one("proxyjump", "none")
    pc = one("proxycommand", "none")
    hka = one("hostkeyalias", "none")
    hostname, port = one("hostname", alias), int(one("port", "22"))
    user = one("user", os.environ.get("USER", "root"))
    ct = one("connecttimeout", "none")
    return SshTarget(
        alias=alias, hostname=hostname, port=port, user=user,
        identity_files=tuple(_expand(x) for x in d.get("identityfile", [])),
        identities_only=one("identitiesonly", "no").lower() == "yes",
        proxy_jump=None if pj.lower() == "none" else pj,
        proxy_command=None if pc.lower() == "none" else
        expand_tokens(pc, hostname=hostname, port=port, user=user, alias=alias),
        host_key_alias=None if hka.lower() == "none" else hka,
        known_hosts_files=tuple(dict.fromkeys(kh)),
        strict_host_key_checking=one("stricthostkeychecking", "ask").lower()
        .replace("false", "no").replace("true", "yes").replace("off", "no"),
        server_alive_interval=int(one("serveraliveinterval", "0") or 0),
        connect_timeout=None if ct.lower() == "none" else float(ct),
        resolved_by=by)


def expand_tokens(text: str, *, hostname: str, port: int, user: str, alias: str) -> str:
    """ssh_config(5) TOKENS for ProxyCommand (`ssh -G` prints them unexpanded)."""
    table = {"h": hostname, "p": str(port), "r": user, "n": alias, "%": "%"}
    out, i = [], 0
    while i < len(text):
        if text[i] == "%" and i + 1 < len(text) and text[i + 1] in table:
            out.append(table[text[i + 1]])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
