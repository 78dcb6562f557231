"""`ddprobe run --differential`: one budget with and without CUDA graphs, outputs compared.

    with connect(host, opts) as r:
        pair = run_differential(r, host, CellRequest(Config(budget=16), differential=True))
        pair.graph.outcome   # garbage when its greedy answers differ from eager's (decisive)
        pair.diff.summary    # "graph vs eager: 2/8 greedy answers differ; first: ..."

The eager cell runs first and the graph cell last, so the server left running is the graph
config (the one a deployment uses). Both keep their answers (chat texts and /generate token
ids); `ddprobe.probes.differential` compares them. The host lock is held across both cells.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ddprobe.cell.experiment import CellReporter, CellRequest, run_cell
from ddprobe.inventory import Host
from ddprobe.probes.differential import Differential, apply
from ddprobe.remote import Remote
from ddprobe.results import CellResult
from ddprobe.server.caches import RunCaches
from ddprobe.server.lock import HostLock


@dataclass
class DifferentialRun:
    graph: CellResult
    eager: CellResult
    diff: Differential

    def to_dict(self) -> dict[str, Any]:
        return {"graph": self.graph.to_dict(), "eager": self.eager.to_dict(),
                "differential": self.diff.to_dict()}


def run_differential(r: Remote, host: Host, req: CellRequest, *,
                     reporter: CellReporter | None = None, break_lock: bool = False,
                     caches: RunCaches | None = None) -> DifferentialRun:
    """`req.config`'s budget eager, then with CUDA graphs (`req.config.graph` is not asked;
    `req.baseline` not used: eager is the reference), both keeping their answers."""
    caches = caches if caches is not None else RunCaches()  # one run: flags read once
    with HostLock(r, host, break_lock=break_lock, caches=caches) as lk:
        kw: dict[str, Any] = {
            "probe": req.probe, "log_dir": req.log_dir, "reporter": reporter, "lock": lk,
            "caches": caches,
            "health_timeout": req.health_timeout, "keep_answers": True}
        eager = run_cell(r, host, replace(req.config, graph=False), stop_after=True, **kw)
        graph = run_cell(r, host, replace(req.config, graph=True), stop_after=req.stop_after,
                         **kw)
    from ddprobe.server.launch import deterministic_backends
    backends = deterministic_backends(r, host, cache=caches.flags)
    return DifferentialRun(graph, eager, apply(graph, eager, backends=backends))
