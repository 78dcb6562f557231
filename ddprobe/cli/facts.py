"""`ddprobe facts --host H`: GPUs, CUDA, interpreter, install, packages, server."""
from __future__ import annotations

import typer
from rich.text import Text

from ddprobe import remote
from ddprobe.cli import common, options
from ddprobe.exitcodes import ExitCode
from ddprobe.facts import Facts, gather_facts
from ddprobe.inventory import Host
from ddprobe.report.facts import facts_table


def _facts(h: Host) -> Facts:
    with common.env().connect(h) as r:
        return gather_facts(r, h)


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
                    common.env().out.print(facts_table(o.value, _sandbox()))
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
