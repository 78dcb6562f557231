"""`report.json`: the whole run as one JSON document (stable keys; fields are only added)."""
from __future__ import annotations

from typing import Any

from ddprobe.report.model import ReportModel, build_model
from ddprobe.store import RunRecord
from ddprobe.untrusted import dumps_json

SCHEMA_VERSION = 1


def report_dict(rec: RunRecord, model: ReportModel | None = None) -> dict[str, Any]:
    m = model or build_model(rec)
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


def render_json(rec: RunRecord, model: ReportModel | None = None) -> str:
    return dumps_json(report_dict(rec, model), indent=2, default=str) + "\n"
