"""Print the gist of a `ddprobe bisect --json` or `ddprobe run --differential --json` document.

    python3 benchmarks/summarise_ddprobe_json.py bisect FILE
    python3 benchmarks/summarise_ddprobe_json.py differential FILE

Used by benchmarks/real_sglang_gpu.sh on the GPU host: one line per cell (with the run dir's
cells.csv, which holds each cell's probes and timings), one per verdict and its evidence.
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any


def _bisect(d: dict[str, Any]) -> None:
    print("status", d.get("status"), "restarts", d.get("restarts_used"), "vs full sweep",
          d.get("restarts_full_sweep"), "rounds", d.get("rounds"), "wall_s", d.get("wall_s"),
          "server_s", d.get("server_s"))
    for g in d.get("groups", []):
        print("cells:", ", ".join(f"{c['key']}={c['outcome']} ({c['purpose']})"
                                  for c in g["cells"]))
        for n in g.get("notes") or []:
            print("  group note:", str(n)[:300])
    for v in d.get("verdicts", []):
        print(f"b{','.join(map(str, v['budgets']))}: {v.get('label')} ({v.get('decided_by')}, "
              f"{v.get('confidence')})")
        for e in v.get("evidence", []):
            print("   -", f"{e.get('kind')}:", str(e.get("summary"))[:500])
        if v.get("next"):
            print("   next:", str(v["next"])[:400])
    for n in d.get("notes") or []:
        print("note:", str(n)[:300])
    csv_path = Path(str(d.get("run_dir", "")), "cells.csv")
    if csv_path.is_file():
        with csv_path.open(newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                print("cell:", "; ".join(f"{k}={v}" for k, v in row.items() if v not in ("", None)))


def _differential(d: dict[str, Any]) -> None:
    for k in ("eager", "graph"):
        c = d.get(k) or {}
        p = c.get("probes") or {}
        eff = c.get("effective") or {}
        cfg = c.get("config") or {}
        print(f"{k}: b{cfg.get('budget')} {c.get('outcome')} accept={p.get('accept_length')} "
              f"server_accept={p.get('server_accept_length')} "
              f"coding={p.get('passed')}/{p.get('total')} tok/s={p.get('tok_s')} "
              f"server cuda_graph={eff.get('cuda_graph')} timings={c.get('timings')} "
              f"sig={(c.get('signature') or {}).get('key')}")
    dd = d.get("differential") or {}
    print("differential:", dd.get("status"), "|", dd.get("summary"))
    for x in (dd.get("diverged") or [])[:4]:
        print("   -", x.get("task"), "at token", x.get("token"), "char", x.get("char"))
    print("determinism:", dd.get("determinism"))


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("bisect", "differential"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        d = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        print(f"{argv[1]}: no JSON document ({e})")
        return 1
    (_bisect if argv[0] == "bisect" else _differential)(d)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
