"""Host preparation before the first server start, driven by data (`server.prepare`).

`prepare: testbed` installs ddprobe's testbed (package `ddtestbed`) into the first PYTHONPATH
entry of the host's env, the way the built-in `testbed` host is set up. It runs once per run
and host entry (the run's `RunCaches.prepared`). On a local host it syncs idempotently (files a
patch modified are kept); on an SSH host it copies the package over only when it is missing, so
patches made on the host are never overwritten by a later run.
"""
from __future__ import annotations

import io
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from ddprobe.errors import ConfigError, DdprobeError
from ddprobe.inventory import Host
from ddprobe.remote import Remote
from ddprobe.server.caches import RunCaches
from ddprobe.server.launch import where


def _site_dir(host: Host) -> str:
    pp = host.env_dict.get("PYTHONPATH", "")
    first = pp.split(":")[0] if pp else ""
    if not first:
        raise ConfigError(f"host '{host.name}': server.prepare 'testbed' needs a PYTHONPATH "
                          f"entry in the host's env to install into", key="env.PYTHONPATH",
                          **where(host))
    return first


def _prepare_testbed(r: Remote, host: Host) -> str:
    from ddtestbed.install import InstallError, sync_testbed

    site = r.expand(_site_dir(host))
    try:
        if host.transport == "local":
            res = sync_testbed(Path(site))
            if not res.changed:
                return ""
            kept = f" (kept {len(res.kept_modified)} patched file(s))" if res.kept_modified \
                else ""
            return f"testbed {res.version} installed into {site}{kept}"
        if r.exists(f"{site}/ddtestbed/__init__.py"):
            return ""
        with tempfile.TemporaryDirectory(prefix="ddprobe-testbed-") as tmp:
            sync_testbed(Path(tmp))
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                for p in sorted(Path(tmp).iterdir()):
                    tar.add(str(p), arcname=p.name)
    except InstallError as e:
        raise DdprobeError(f"{host.name}: {e}") from None
    r.run(["sh", "-c", 'mkdir -p -- "$1" && tar -xzf - -C "$1"', "sh", site],
          input=buf.getvalue(), check=True, timeout=120)
    return f"testbed copied to {site} on the host"


PREPARERS: dict[str, Callable[[Remote, Host], str]] = {"testbed": _prepare_testbed}


def prepare_host(r: Remote, host: Host, *, force: bool = False,
                 caches: RunCaches | None = None) -> str | None:
    """Run the host's `server.prepare` step once per run (`caches.prepared`; a caller that
    passes none runs it every time); a note on what it changed, or None when nothing was to
    be done."""
    name = host.server.prepare
    if not name:
        return None
    fn = PREPARERS.get(name)
    if fn is None:
        raise ConfigError(f"unknown server.prepare {name!r} for host '{host.name}' (known: "
                          f"{', '.join(sorted(PREPARERS))})", key="server.prepare", **where(host))
    key = (host.name, host.target, host.python, repr(host.env) + name)
    done = (caches if caches is not None else RunCaches()).prepared
    if key in done and not force:
        return None
    note = fn(r, host)
    done.add(key)
    return note or None
