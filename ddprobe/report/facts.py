"""A host's facts (`ddprobe facts`) in a terminal."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

if TYPE_CHECKING:
    from ddprobe.facts import Facts


def facts_table(f: Facts, sandbox: tuple[str, str | None]) -> Table:
    """`ddprobe facts`: one host's facts, and the probe sandbox of this machine (`sandbox`:
    its backend and why not a better one)."""
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
    backend, why = sandbox
    t.add_row("probe sandbox", f"{backend} on this machine" + (f" ({why})" if why else ""))
    return t
