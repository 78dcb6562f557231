"""`cells.csv`: one row per cell, through pandas (so a notebook reads it with `read_csv`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddprobe.report.timing import csv_columns
from ddprobe.results import CellResult, ProbeSummary, Verdict
from ddprobe.runmodel import RunModel
from ddprobe.store import RunRecord
from ddprobe.untrusted import for_csv

if TYPE_CHECKING:
    import pandas as pd

COLUMNS: tuple[str, ...] = (
    "run_id", "index", "host", "key", "budget", "graph", "max_bs", "backend", "extra_args",
    "outcome", "signature_kind", "signature", "coding_passed", "coding_total", "accept_length",
    "accept_source", "server_accept_length", "tok_s", "aggregate_tok_s", "latency_s",
    "restart_s", "health_s", "probe_s", "total_s", "patches", "kind", "error", "started_at",
    "log_path", "verdict", "verdict_confidence", "verdict_tested", "next_command")


def _verdict_of(rec: RunRecord, host: str, budget: int) -> Verdict | None:
    """The verdict covering this cell's budget (and host, when verdicts name hosts)."""
    for v in rec.verdicts:
        if budget in v.budgets and (not v.host or host in v.host.split(",")):
            return v
    return next((v for v in rec.verdicts if budget in v.budgets), None)


def cells_frame(m: RunModel) -> pd.DataFrame:
    rec = m.record
    import pandas as pd  # ~1 s of start-up: imported by the CSV report only
    rows = [_row(rec, i, c) for i, c in enumerate(rec.cells, 1)]
    # host text (errors, signatures, paths): cleaned, formulas defused (ddprobe/untrusted.py)
    df = pd.DataFrame([{k: for_csv(v) for k, v in r.items()} for r in rows],
                      columns=list(COLUMNS))
    # integer columns with gaps would otherwise turn into floats ("64.0") in the CSV
    for col in ("max_bs", "coding_passed", "coding_total"):
        df[col] = df[col].astype("Int64")
    return df


def render_csv(m: RunModel) -> str:
    return str(cells_frame(m).to_csv(index=False, lineterminator="\n"))


def _row(rec: RunRecord, i: int, c: CellResult) -> dict[str, Any]:
    """One cell's CSV row: its config, outcome, probes, timings and the verdict of its budget."""
    t = c.timings
    return {"run_id": rec.run_id, "index": i, "host": c.host, "key": c.config.key,
            "budget": c.config.budget, "graph": c.config.graph, "max_bs": c.config.max_bs,
            "backend": c.config.backend or "", "extra_args": " ".join(c.config.extra_args),
            "outcome": c.outcome.value,
            "signature_kind": c.signature.kind if c.signature else "",
            "signature": c.signature.key if c.signature else "",
            **_probe_columns(c.probes),
            "restart_s": t.get("restart"), "health_s": t.get("health"),
            "probe_s": t.get("probe"), "total_s": t.get("total"),
            "patches": " ".join(c.patches), "kind": c.kind, "error": c.error or "",
            "started_at": c.started_at, "log_path": c.log_path or "",
            **_verdict_columns(_verdict_of(rec, c.host, c.config.budget)),
            **csv_columns(c)}


def _probe_columns(p: ProbeSummary | None) -> dict[str, Any]:
    if p is None:
        return {"coding_passed": None, "coding_total": None, "accept_length": None,
                "accept_source": "", "server_accept_length": None, "tok_s": None,
                "aggregate_tok_s": None, "latency_s": None}
    return {"coding_passed": p.passed, "coding_total": p.total,
            "accept_length": p.accept_length, "accept_source": p.accept_source,
            "server_accept_length": p.server_accept_length, "tok_s": p.tok_s,
            "aggregate_tok_s": p.aggregate_tok_s, "latency_s": p.latency_s}


def _verdict_columns(v: Verdict | None) -> dict[str, Any]:
    if v is None:
        return {"verdict": "", "verdict_confidence": "", "verdict_tested": None,
                "next_command": ""}
    return {"verdict": v.kind, "verdict_confidence": v.confidence, "verdict_tested": v.tested,
            "next_command": v.next_command}
