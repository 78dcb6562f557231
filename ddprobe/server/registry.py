"""The managers by name: `get_manager` builds the one `host.server.manager` names.

`manager.py` holds the interface and its records and imports none of its subclasses; each
subclass module imports it, and this module, above them all, picks one (a subclass module is
imported only when a host names it).
"""
from __future__ import annotations

from ddprobe.errors import ConfigError
from ddprobe.inventory import Host
from ddprobe.remote import Remote
from ddprobe.server.launch import where
from ddprobe.server.manager import Manager


def get_manager(r: Remote, host: Host) -> Manager:
    """The manager `host.server.manager` names."""
    kind = host.server.manager
    if kind == "command":
        from ddprobe.server.command import CommandManager
        return CommandManager(r, host)
    if kind == "systemd":
        from ddprobe.server.systemd import SystemdManager
        return SystemdManager(r, host)
    if kind == "docker":
        from ddprobe.server.docker import DockerManager
        return DockerManager(r, host)
    raise ConfigError(f"unknown server manager {kind!r} for host '{host.name}' (command, systemd "
                      f"or docker)", key="server.manager", **where(host))
