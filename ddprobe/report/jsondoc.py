"""`report.json`: the whole run as one JSON document (stable keys; fields are only added)."""
from __future__ import annotations

from typing import Any

from ddprobe.runmodel import RunModel, SmokeRun
from ddprobe.untrusted import dumps_json

SCHEMA_VERSION = 1


def report_dict(m: RunModel) -> dict[str, Any]:
    rec = m.record
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": rec.run_id,
        "meta": rec.meta,
        "plan": rec.plan,
        "finished": rec.finished,
        "end": rec.end,
        "summary": {
            "command": m.command, "hosts": list(m.hosts), "budgets": list(m.budgets),
            "cells": len(m.cells), "outcomes": dict(m.counts),
            "restarts_used": m.restarts_used, "restarts_full_sweep": m.restarts_full_sweep,
            "verdicts": [f"{v.label}: budgets {','.join(map(str, v.budgets))}"
                         for v in m.verdicts],
            "disagreements": list(m.disagreements),
        },
        "matrix": [
            {"host": e.host, "budget": e.budget, "mode": e.mode, "outcome": e.outcome,
             "accept_length": e.accept, "tok_s": e.tok_s, "coding": e.coding,
             "signature": e.signature, "cells": [c.index for c in e.cells],
             "variants": [{"cell": c.index, "variant": c.variant, "outcome": c.outcome}
                          for c in e.variants]}
            for hm in m.matrices for e in hm.entries],
        "cells": [{"index": i, "key": c.config.key, **c.to_dict()}
                  for i, c in enumerate(rec.cells, 1)],
        "verdicts": [v.to_dict() for v in rec.verdicts],
        "notes": list(rec.notes),
    }


def render_json(m: RunModel) -> str:
    return dumps_json(report_dict(m), indent=2, default=str) + "\n"


def bisect_doc(m: RunModel) -> dict[str, Any]:
    """`ddprobe bisect --json`: the verdicts and, per group, its rounds, restarts and cells."""
    return {
        "run_id": m.run_id, "run_dir": str(m.run_dir), "budgets": list(m.budgets_asked),
        "status": m.status, "restarts_used": m.restarts_used,
        "restarts_this_invocation": m.restarts_now,
        "restarts_full_sweep": m.restarts_full_sweep, "rounds": m.rounds,
        "wall_s": m.wall_s, "server_s": m.server_s,
        "verdicts": [v.to_dict() for v in m.verdicts],
        "groups": [{"name": g.name, "hosts": list(g.hosts), "identity": g.identity,
                    "rounds": g.rounds, "restarts": g.restarts,
                    "restarts_full_sweep": g.full_sweep, "suspects": list(g.suspects),
                    "patch_kept": g.patch_kept, "notes": list(g.notes),
                    "verdicts_final": list(g.finals),
                    "cells": [{"key": (c.plan or {}).get("key", c.config.key),
                               "purpose": (c.plan or {}).get("purpose"), "host": c.host,
                               "outcome": c.outcome.value} for c in g.cells]}
                   for g in m.groups],
        "disagreements": list(m.disagreement_details), "notes": list(m.run_notes),
    }


def sweep_doc(m: RunModel) -> dict[str, Any]:
    """`ddprobe sweep --json`: the table (a row per group and budget) and every cell."""
    return {"run_id": m.run_id, "run_dir": str(m.run_dir), "variants": list(m.sweep_variants),
            "restarts_used": m.restarts_used, "wall_s": m.wall_s,
            "rows": [{"group": r.group, "budget": r.budget, "entries": r.entries}
                     for r in m.sweep_rows],
            "notes": list(m.run_notes), "cells": [c.to_dict() for c in m.results]}


def smoke_doc(s: SmokeRun) -> dict[str, Any]:
    """`ddprobe smoke --json`: per host its exit code, properties, cases and cells."""
    return {"run_id": s.run_id, "run_dir": str(s.run_dir), "exit_code": s.exit_code,
            "wall_s": s.wall_s,
            "hosts": [{"host": h.host, "exit_code": h.exit_code, "time": h.time,
                       "properties": h.properties, "cases": [c.to_dict() for c in h.cases],
                       "cells": [c.to_dict() for c in h.cells]} for h in s.hosts]}
