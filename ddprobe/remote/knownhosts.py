"""Host keys: which known_hosts files are read, what happens to an unknown key, and the
messages for a changed or unknown one."""
from __future__ import annotations

import logging
from pathlib import Path

import paramiko

from ddprobe.remote.sshconfig import SshTarget

log = logging.getLogger("ddprobe.remote")


class RecordingPolicy(paramiko.MissingHostKeyPolicy):
    """Accept an unknown key and record it in the known_hosts file in use (explicit opt-in)."""

    def __init__(self, path: str, *, save: bool) -> None:
        self.path, self.save = path, save

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        if self.save:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
            log.info("recorded host key of %s in %s", hostname, self.path)


def known_host_name(t: SshTarget) -> str:
    return t.hostname if t.port == 22 else f"[{t.hostname}]:{t.port}"

