"""Server processes on a host: managers (command, systemd, docker), launch flags, host
preparation, host lock. No health wait, no classification, no probes: those are the cell's
(`ddprobe.cell`), which builds on this package (never the other way round).

    caches = RunCaches()  # one per run: the flags read, the prepare steps done, the locks held
    with connect(host, RemoteOptions(ssh_config=...)) as r, HostLock(r, host, caches=caches):
        mgr = get_manager(r, host)
        flags, note = host_flags(r, host, cache=caches.flags)
        launch = check_launch(build_launch(host, config, flags, template=mgr.template()), flags)
        mgr.stop(); mgr.start(launch)
        with r.tunnel(host.server.port) as port:
            res = wait_healthy(  # ddprobe.cell.health
           f"http://127.0.0.1:{port}", mgr.peek, timeout=...)

`ddprobe.cell.experiment.run_cell` does all of that for one cell.
"""
from __future__ import annotations

from ddprobe.hostside.errors import AlreadyRunningError, DiskFullError, HostOpError, PortInUseError
from ddprobe.server.caches import RunCaches
from ddprobe.server.launch import (
    Launch,
    build_launch,
    check_launch,
    host_flags,
    server_args,
    server_target,
)
from ddprobe.server.lock import HostLock, LockInfo, read_lock
from ddprobe.server.manager import Manager, Peek, ServerStatus, StartInfo, StopInfo
from ddprobe.server.prepare import prepare_host
from ddprobe.server.registry import get_manager

__all__ = ["AlreadyRunningError", "DiskFullError", "HostLock", "RunCaches",
           "HostOpError", "Launch", "LockInfo", "Manager", "Peek", "PortInUseError",
           "ServerStatus", "StartInfo", "StopInfo", "build_launch",
           "check_launch", "get_manager", "host_flags", "prepare_host", "read_lock", "server_args",
           "server_target"]
