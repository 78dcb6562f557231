"""Replaying a corpus log (tests/data/logs/) through a real `run` cell: the stand-in server
(tests/logreplay.py) on a local host, launched by ddprobe's command manager like any server.
Shared by tests/test_log_corpus.py and benchmarks/log_classification.py."""
from __future__ import annotations

import re
import socket
import sys
from pathlib import Path

from ddprobe.cell.experiment import ProbeOptions, run_cell
from ddprobe.inventory import Host, ServerSettings
from ddprobe.remote import RemoteOptions, connect
from ddprobe.results import CellResult, Config, Outcome
from ddprobe.signatures.corpus import CorpusLog

HERE = Path(__file__).resolve().parent
REPLAY = HERE / "logreplay.py"
SUITE = HERE.parent / "ddprobe" / "probes" / "suites" / "coding.json"
TASK = "reverse_words"
PROBE_TIMEOUT = 3.0
# what the stand-in prints before it starts serving: up to the first line a real server prints
# once it is up (independent of ddprobe's own phase markers)
_UP = re.compile(r"fired up and ready|Uvicorn running|Application startup complete|"
                 r"Starting vLLM|Decode batch|Prefill batch|\"POST ")
# linger 0: the process exits with the log. At start-up 3 s outlives the cell's 2 s settle
# after a fatal line; while serving 6 s outlives the probes' timeout with the HTTP front up
# (SGLang's parent outliving its scheduler)
LINGERS = {"exit": (0.0, 3.0), "serve-then-exit": (0.0, 6.0)}
CELL_OUTCOME = {"ok": Outcome.OK, "crash": Outcome.CRASH, "hang": Outcome.HANG,
                "refused": Outcome.REFUSED, "error": Outcome.ERROR, "garbage": Outcome.GARBAGE}


def replay_mode(c: CorpusLog) -> str:
    """How the server the excerpt came from behaved (from the expected class and phase)."""
    if c.phase in ("startup", "capture"):
        return "hang" if c.outcome == "hang" else "exit"
    return {"crash": "serve-then-exit", "error": "serve-then-exit", "hang": "serve-then-hang",
            "ok": "serve", "garbage": "serve"}[c.outcome]


def lingers(c: CorpusLog) -> tuple[float, ...]:
    return LINGERS.get(replay_mode(c), (0.0,))


def split_index(c: CorpusLog) -> int:
    for i, line in enumerate(c.text.splitlines()):
        if _UP.search(line):
            return i
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def replay_host(c: CorpusLog, workdir: Path, *, linger: float) -> Host:
    launch = ("{python}", str(REPLAY), "--log", str(c.path), "--mode", replay_mode(c),
              "--split", str(split_index(c)), "--linger", str(linger), "--answers", str(SUITE),
              "{args}")
    hang = c.outcome == "hang" and c.phase != "serving"
    server = ServerSettings(port=_free_port(), model_path="replay/model", launch=launch,
                            workdir=str(workdir), health_timeout=6.0 if hang else 30.0,
                            stall_timeout=2.0, stop_timeout=2.0)
    return Host(name="replay", host="localhost", python=sys.executable, package="logreplay",
                server=server, transport="local")


def run_replay(c: CorpusLog, workdir: Path, *, linger: float) -> CellResult:
    host = replay_host(c, workdir, linger=linger)
    with connect(host, RemoteOptions()) as r:  # a local host
        return run_cell(r, host, Config(budget=8),
                        probe=ProbeOptions(tasks=(TASK,), concurrency=1, max_tokens=64,
                                           timeout=PROBE_TIMEOUT))
