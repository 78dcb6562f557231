"""`ddprobe hosts [--check]`: the inventory, and each host's reachability in parallel."""
from __future__ import annotations

import time
from typing import Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from ddprobe import remote
from ddprobe.cli import common, options
from ddprobe.errors import ConfigError, RemoteCommandError
from ddprobe.exitcodes import ExitCode
from ddprobe.inventory import Host


def _check(h: Host) -> tuple[float, float, str]:
    """Connect and authenticate (host key checked), time one protocol round trip, then run a
    command with the host's interpreter the way every other command does: a host where
    commands fail is not ok, whatever its ping says (issue 15)."""
    t0 = time.monotonic()
    with common.env().connect(h) as r:
        rtt = min(r.ping() for _ in range(3))
        connect_s = time.monotonic() - t0
        res = r.python(["-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                       timeout=60)
        if not res.ok:
            raise RemoteCommandError(h.name, res.argv, res.exit_code, res.stdout, res.stderr)
        version = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else "?"
    return rtt, connect_s, version


def register(app: typer.Typer) -> None:
    @app.command("hosts")
    def hosts_cmd(
        check: bool = typer.Option(False, "--check", help="Connect to each host, in parallel."),
        host: Optional[str] = typer.Option(None, "--host", "-H", help="Only these hosts/groups."),
        deadline: float = typer.Option(30.0, "--deadline", help="Per-host deadline (s)."),
        example: Optional[str] = typer.Option(
            None, "--example", metavar="gpu|testbed",
            help="Print a documented hosts.yaml and exit: gpu (every key, GPU hosts) or "
                 "testbed (the testbed on an SSH host)."),
        as_json: options.Json = False,
    ) -> None:
        """List the inventory; with --check, reachability and round-trip time per host."""
        if example is not None:
            from ddprobe.inventory.examples import example_text
            common.env().out.file.write(example_text(example))
            common.env().out.file.flush()
            return
        inv = common.env().inventory
        hs = common.hosts(host) if host else common.env().listed_hosts()  # within --limit
        rows: list[dict[str, Any]] = [{"name": h.name, "target": h.target, "transport": h.transport,
                 "python": h.python, "package": h.package, "labels": h.labels_dict,
                 "groups": [g for g, m in inv.groups.items() if h.name in m],
                 "source": h.source} for h in hs]
        failed = config = False
        if check:
            with common.env().err.status(f"checking {len(hs)} host(s)..."):
                res = remote.fan_out(hs, _check, max_workers=16, deadline=deadline)
            for row, o in zip(rows, res, strict=True):
                row["status"] = o.status
                row["rtt_ms"] = round(o.value[0] * 1000, 2) if o.value is not None else None
                row["connect_ms"] = round(o.value[1] * 1000, 1) if o.value is not None else None
                row["python_version"] = o.value[2] if o.value is not None else None
                row["error"] = o.error
                failed |= o.status != "ok"
                config |= isinstance(o.exc, ConfigError)
        if as_json:
            common.emit_json({"inventory": inv.path, "hosts": rows,
                              "groups": {g: list(m) for g, m in inv.groups.items()}})
        else:
            t = Table(title=f"inventory: {inv.path or '(none: built-in hosts only)'}")
            for c in ["host", "target", "python", "package", "groups"] + (
                    ["status", "rtt ms", "error"] if check else []):
                # a host name is never cut (`tes…`): the paths and errors fold instead
                t.add_column(c, no_wrap=c in ("host", "package", "status", "rtt ms"),
                             overflow="fold",
                             min_width=max((len(r["name"]) for r in rows), default=4)
                             if c == "host" else None)
            for row in rows:
                cells = [row["name"], row["target"], row["python"], row["package"],
                         ",".join(row["groups"])]
                if check:
                    st = row["status"]
                    color = "green" if st == "ok" else "red"
                    cells += [Text(st, style=color), str(row["rtt_ms"] or ""),
                              row["error"] or ""]
                t.add_row(*cells)
            common.env().out.print(t)
        if config:
            raise typer.Exit(int(ExitCode.CONFIG))
        if failed:
            raise typer.Exit(int(ExitCode.UNREACHABLE))
