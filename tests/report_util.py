"""The report tests' seed run (shared by test_report, test_report_html, test_playbook_run): the
cells and verdicts of a four-budget bisect, and a real journal of them on disk."""
from __future__ import annotations

from pathlib import Path

from ddprobe.results import CellResult, Config, Evidence, Outcome, ProbeSummary, Signature, Verdict
from ddprobe.runmodel import RunModel, load_model
from ddprobe.store import RunStore

MASK = {"attr": "cuda_graph_custom_mask", "file": "srt/layers/attention/triton_backend.py",
        "line": 101, "shape": "(max_bs * default_num_draft_tokens * max_context_len,)",
        "sizes": [{"budget": 8, "draft_tokens": 9, "elements": 18874368, "bytes": 18874368,
                   "short_by": None},
                  {"budget": 16, "draft_tokens": 17, "elements": 18874368, "bytes": 18874368,
                   "short_by": 16777216}]}


def _cell(budget: int, graph: bool, outcome: Outcome, *, accept: float | None = None,
          tok_s: float | None = None, passed: int = 0, total: int = 20,
          sig: Signature | None = None, max_bs: int | None = None,
          patches: tuple[str, ...] = (), host: str = "b300") -> CellResult:
    probes = None if outcome in (Outcome.CRASH, Outcome.HANG) else ProbeSummary(
        passed=passed, total=total, accept_length=accept, tok_s=tok_s,
        accept_source="spec_accept_length")
    return CellResult(host=host, config=Config(budget=budget, graph=graph, max_bs=max_bs),
                      outcome=outcome, signature=sig, probes=probes,
                      timings={"restart": 360.0, "health": 300.0, "probe": 12.0, "total": 372.0},
                      log_excerpt=[sig.line] if sig else [], started_at="2026-11-29T10:00:00",
                      patches=list(patches))


ILLEGAL = Signature("cuda_illegal_address", "CUDA error: an illegal memory access was encountered",
                    "RuntimeError: CUDA error: an illegal memory access was encountered")
CUBLAS = Signature("cublas", "CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmEx",
                   "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling "
                   "`cublasGemmEx( handle, opa, opb, m, n, k, ...)`")
GARBAGE = Signature("garbage", "accept length 1.0, coding 0/20")


def seed_cells(host: str = "b300") -> list[CellResult]:
    return [
        _cell(8, True, Outcome.OK, accept=4.5, tok_s=285.0, passed=20, host=host),
        _cell(16, True, Outcome.CRASH, sig=ILLEGAL, host=host),
        _cell(32, True, Outcome.GARBAGE, accept=1.0, tok_s=240.0, passed=0, sig=GARBAGE,
              host=host),
        _cell(64, True, Outcome.CRASH, sig=CUBLAS, host=host),
        _cell(16, False, Outcome.OK, accept=5.9, tok_s=111.0, passed=20, host=host),
    ]


def seed_verdicts() -> list[Verdict]:
    return [
        Verdict("buffer_sizing", [16], ILLEGAL.id, "crash", "high", "oversize experiment",
                [Evidence("eager", "b16 passes with CUDA graphs off", ["b16-eager"]),
                 Evidence("oversize", "b16 passes with cuda_graph_custom_mask enlarged x4",
                          ["b16-graph"], {"buffer": MASK})],
                next_step="size cuda_graph_custom_mask for num_draft_tokens",
                buffer=MASK, host="b300"),
        Verdict("graph_capture", [32], GARBAGE.id, "garbage", "medium", "oversize experiment",
                [Evidence("oversize", "b32 still garbage with every suspect enlarged",
                          ["b32-graph"])],
                next_step="look for buffers re-allocated after capture"),
        Verdict("buffer_sizing", [64], CUBLAS.id, "crash", "high", "max-bs experiment",
                [Evidence("max_bs", "b64 passes with --cuda-graph-max-bs 32",
                          ["b64-graph-bs32"])],
                next_step="lower --cuda-graph-max-bs or enlarge the cuBLAS workspace"),
    ]


def write_seed_run(root: Path, *, finished: bool = True, extra: list[CellResult] | None = None,
                   run_id: str = "20261129-100000-bisect-ab12") -> Path:
    """A real journal on disk, as a bisect would write it."""
    store = RunStore(root / run_id)
    store.append({"type": "run", "run_id": run_id, "command": "bisect",
                  "argv": ["ddprobe", "bisect", "--host", "b300", "--budgets", "8,16,32,64"],
                  "hosts": ["b300"], "budgets": [8, 16, 32, 64],
                  "started_at": "2026-11-29T10:00:00", "options": {}})
    store.append({"type": "plan", "cells": [Config(b).to_dict() for b in (8, 16, 32, 64)],
                  "note": "binary search over budgets"})
    for c in seed_cells() + (extra or []):
        store.cell(c)
    if finished:
        for v in seed_verdicts():
            store.verdict(v)
        store.append({"type": "note", "text": "3 failure modes; never assume a single cause"})
        store.append({"type": "end", "finished_at": "2026-11-29T10:40:00", "restarts_used": 5,
                      "restarts_full_sweep": 8, "exit_code": 1})
    return store.dir


def bisect_model(root: Path, verdicts: list[Verdict], budgets: list[int]) -> RunModel:
    """A finished bisect of one group with these verdicts and no cells, as its journal holds
    it: what `render_bisect` draws (the model a bisect returns)."""
    store = RunStore(root / "20261129-090000-bisect-r")
    store.append({"type": "run", "run_id": store.run_id, "command": "bisect", "hosts": ["h"],
                  "budgets": budgets, "started_at": "2026-11-29T09:00:00", "options": {}})
    for v in verdicts:
        store.verdict(v)
    store.append({"type": "end", "finished_at": "2026-11-29T10:00:00", "restarts_used": 8,
                  "restarts_this_invocation": 8, "restarts_full_sweep": 8, "rounds": 8,
                  "wall_s": 1.0, "groups": [{"key": "g", "name": "g", "hosts": ["h"]}]})
    return load_model(store.dir)
