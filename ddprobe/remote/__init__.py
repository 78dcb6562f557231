"""Remote execution: one connection per host, argv lists only, ssh or local, same interface.

Every command is an argv list joined with shlex quoting at this boundary (base.build_command) and
nowhere else. One module per concept (pyinfra's connectors/ is the model): base (the record, the
options, the Remote interface), local, ssh, keytrust (host keys), sshconfig, tunnel, fanout.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ddprobe.inventory import Host
from ddprobe.remote.base import (
    CmdResult,
    Remote,
    RemoteOptions,
    build_command,
    check_env_names,
)
from ddprobe.remote.fanout import HostOutcome, fan_out
from ddprobe.remote.local import LocalRemote

if TYPE_CHECKING:
    from ddprobe.remote.ssh import SshRemote

# paramiko logs every refused tunnel channel at ERROR with no handler set: keep stderr clean
logging.getLogger("paramiko").addHandler(logging.NullHandler())

__all__ = ["CmdResult", "HostOutcome", "LocalRemote", "Remote", "RemoteOptions", "SshRemote",
           "build_command", "check_env_names", "connect", "fan_out"]


def __getattr__(name: str) -> Any:
    # paramiko (~0.5 s) is imported by the first SSH connection, not by `ddprobe --version`,
    # a completion or a command that touches no host
    if name == "SshRemote":
        from ddprobe.remote.ssh import SshRemote
        return SshRemote
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def connect(host: Host, opts: RemoteOptions) -> Remote:
    """Open one connection to a host with the run's options (use as a context manager)."""
    if host.transport == "local":
        return LocalRemote(host, opts)
    from ddprobe.remote.ssh import SshRemote
    return SshRemote(host, opts).connect()
