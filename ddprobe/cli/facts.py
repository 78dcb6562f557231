"""`ddprobe facts --host H`: GPUs, CUDA, interpreter, install, packages, server."""
from __future__ import annotations

import typer
from rich.table import Table
from rich.text import Text

from ddprobe import remote
from ddprobe.cli import common, options
from ddprobe.exitcodes import ExitCode
from ddprobe.facts import Facts, gather_facts
from ddprobe.inventory import Host


def _facts(h: Host) -> Facts:
    with common.env().connect(h) as r:
        return gather_facts(r, h)


def _render(f: Facts) -> Table:
    t = Table(title=f"facts: {f.host}", show_header=False)
    t.add_column("key", style="bold")
    t.add_column("value")
    t.add_row("hostname", f.hostname)
    t.add_row("os", f"{f.os} ({f.kernel}, {f.arch})")
    t.add_row("cpus / memory", f"{f.cpus} / {f.memory_mib} MiB")
    if f.gpus:
        for i, g in enumerate(f.gpus):
            t.add_row(f"gpu {i}", f"{g['name']}  cc {g['compute_cap']} ({g.get('sm')})  "
                                  f"{g['memory_mib']} MiB  driver {g['driver']}")
    else:
        t.add_row("gpus", "no NVIDIA GPU")
    t.add_row("cuda", str(f.cuda or "-"))
    t.add_row("compute-sanitizer", f.compute_sanitizer or "-")
    t.add_row("python", f"{f.python.get('path')} ({f.python.get('version')})")
    if f.install:
        t.add_row("install", f"{f.install['name']} {f.install['version']} at {f.install['path']}")
    else:
        t.add_row("install", "not found")
    t.add_row("packages", ", ".join(f"{k} {v}" for k, v in f.packages.items()) or "-")
    s = f.server
    t.add_row("server", f"port {s.get('port')}: " + (
        f"listening, /health -> {s.get('health')}" if s.get("listening") else "not listening"))
    backend, why = _sandbox()
    t.add_row("probe sandbox", f"{backend} on this machine" + (f" ({why})" if why else ""))
    return t


def _sandbox() -> tuple[str, str | None]:
    """The sandbox the probes' untrusted code would run in: local, not on the host."""
    from ddprobe.probes.sandbox import local_backend
    return local_backend()


def register(app: typer.Typer) -> None:
    @app.command("facts")
    def facts_cmd(host: options.Hosts, as_json: options.Json = False) -> None:
        """Facts of one or more hosts, gathered in parallel (one round-trip each)."""
        hs = common.hosts(host)
        res = remote.fan_out(hs, _facts, max_workers=16, deadline=90)
        if as_json:
            backend, why = _sandbox()
            docs = [{**o.value.to_dict(), "probe_sandbox": {"backend": backend, "where": "local",
                                                            "note": why}}
                    if o.value else {"host": o.host.name, "status": o.status, "error": o.error}
                    for o in res]
            common.emit_json({"hosts": docs})  # one shape for one host and for many
        else:
            for o in res:
                if o.value:
                    common.env().out.print(_render(o.value))
                else:
                    common.env().err.print(Text(f"{o.host.name}: {o.status}: {o.error}",
                                                style="red"))
        bad = [o for o in res if o.status != "ok"]
        if bad:
            code = ExitCode.UNREACHABLE if any(
                o.status in ("unreachable", "host key", "auth", "timeout")
                for o in bad) else ExitCode.FAILED
            if len(res) == 1 and bad[0].exc is not None and hasattr(bad[0].exc, "exit_code"):
                code = bad[0].exc.exit_code
            raise typer.Exit(int(code))
