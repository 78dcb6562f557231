"""Runs on disk: runs/<run-id>/ holds journal.jsonl (one JSON event a line), per-cell server
logs and the rendered reports. A run is resumable and re-renderable without touching a host.

Journal events (each a JSON object with a "type"):
  {"type": "run", "run_id", "command", "argv", "hosts", "budgets", "started_at", "options": {}}
  {"type": "plan", "cells": [config dicts], "note": str}
  {"type": "cell", **CellResult.to_dict()}
  {"type": "verdict", **Verdict.to_dict()}
  {"type": "note", "text": str}
  {"type": "preflight", "group", "host", "ran", "refused", "results"}  (bisect: server/preflight)
  {"type": "end", "finished_at", "restarts_used", "restarts_full_sweep", "exit_code", "wall_s",
   "infra_errors", "run_notes"; a bisect's "restarts_this_invocation", "rounds", "status",
   "server_s", "disagreements" (texts), "disagreement_details", "groups" (per group: key,
   name, hosts, identity, rounds, restarts, suspects, patch_kept, notes, verdicts_final);
   a sweep's "variants" and "rows"}  (read back by ddprobe/runmodel.py)
"""
from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddprobe.errors import ConfigError
from ddprobe.results import CellResult, UnknownValue, Verdict
from ddprobe.untrusted import dumps_json, file_part, one_line


def runs_root() -> Path:
    return Path(os.environ.get("DDPROBE_RUNS", "runs"))


def new_run_id(command: str) -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{command}-{secrets.token_hex(2)}"


@dataclass
class RunRecord:
    run_id: str
    dir: Path
    meta: dict[str, Any] = field(default_factory=dict)
    plan: list[dict[str, Any]] = field(default_factory=list)
    cells: list[CellResult] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    end: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.end is not None

    @property
    def resumable(self) -> bool:
        """Unfinished, or finished with cells that ended in an infrastructure error (those run
        again on `--resume`; the others are not repeated)."""
        return self.end is None or bool(self.end.get("infra_errors"))

    @property
    def restarts_used(self) -> int:
        return sum(1 for c in self.cells if c.timings.get("restart") is not None
                   and c.outcome.value != "refused")


class RunStore:
    """Append-only writer for one run directory."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        self.journal = self.dir / "journal.jsonl"

    @classmethod
    def create(cls, command: str, root: Path | None = None) -> RunStore:
        rid = new_run_id(command)
        return cls((root or runs_root()) / rid)

    @property
    def run_id(self) -> str:
        return self.dir.name

    def append(self, event: dict[str, Any]) -> None:
        line = dumps_json(event, default=str)
        fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with open(fd, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def cell(self, c: CellResult) -> None:
        self.append({"type": "cell", **c.to_dict()})

    def verdict(self, v: Verdict) -> None:
        self.append({"type": "verdict", **v.to_dict()})

    def log_path(self, host: str, key: str) -> Path:
        # host names come from the inventory and keys from configs: neither may leave logs/
        return self.dir / "logs" / f"{file_part(host)}-{file_part(key)}.log"


def find_run(run_id: str, root: Path | None = None) -> Path:
    base = root or runs_root()
    p = Path(run_id)
    if p.is_dir() and (p / "journal.jsonl").exists():
        return p
    cand = base / run_id
    if (cand / "journal.jsonl").exists():
        return cand
    matches = sorted(base.glob(f"{run_id}*")) if base.is_dir() else []
    matches = [m for m in matches if (m / "journal.jsonl").exists()]
    if len(matches) == 1:
        return matches[0]
    if run_id == "latest" and base.is_dir():
        all_runs = sorted(m for m in base.iterdir() if (m / "journal.jsonl").exists())
        if all_runs:
            return all_runs[-1]
    raise ConfigError(f"no run '{run_id}' under {base}", key="RUN_ID")


def _events(j: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, event) of each journal line. A line that does not parse (JSON of UTF-8
    text) is skipped: a kill mid-write leaves a torn line (cut inside a character, maybe), and
    resume redoes its cell. A line that parses but is not an object is a ConfigError."""
    for n, raw in enumerate(j.read_bytes().split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            ev = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            continue
        if not isinstance(ev, dict):
            raise ConfigError("a journal line that is not a JSON object", path=str(j), line=n)
        yield n, ev


def load_run(run_dir: Path) -> RunRecord:
    """The run's journal, read: its header, plan, cells, notes, the last end entry and the
    verdicts written with it (a resumed run writes every verdict again before its new end:
    those of an earlier end are replaced, never listed twice)."""
    j = run_dir / "journal.jsonl"
    rec = RunRecord(run_id=run_dir.name, dir=run_dir)
    ended = False  # an end entry came after the last verdict
    for n, ev in _events(j):
        t = ev.pop("type", None)
        if t == "run":
            rec.meta = ev
        elif t == "plan":
            cells = ev.get("cells", [])
            rec.plan = cells if isinstance(cells, list) else []
        elif t in ("cell", "verdict"):
            try:
                if t == "cell":
                    rec.cells.append(CellResult.from_dict(ev))
                else:
                    if ended:
                        rec.verdicts, ended = [], False
                    rec.verdicts.append(Verdict.from_dict(ev))
            except UnknownValue as e:  # a kind or status this version does not know
                raise ConfigError(str(e), path=str(j), line=n, key=e.key) from None
            except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError) as e:
                # a field missing or of another type: a damaged journal, not a bug here
                raise ConfigError(f"a damaged {t} entry ({type(e).__name__}: "
                                  f"{one_line(e, limit=200)})", path=str(j), line=n) from None
        elif t == "note":
            text = ev.get("text", "")
            rec.notes.append(text if isinstance(text, str) else str(text))
        elif t == "end":
            rec.end, ended = ev, True
        elif t is None:
            raise ConfigError("journal event without a type", path=str(j), line=n)
    return rec
