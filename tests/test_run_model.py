"""One model of a run (ddprobe/runmodel.py): a bisect or sweep returns the model of its journal,
and the terminal and the files are drawn from it, so what `ddprobe bisect` prints is what the
run's journal, reloaded from disk, renders; the engine imports neither report/ nor pandas."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddprobe.cli import main
from ddprobe.exitcodes import ExitCode
from ddprobe.report.jsondoc import bisect_doc, sweep_doc
from ddprobe.report.terminal import render_bisect, render_sweep
from ddprobe.report.write import FORMATS, render
from ddprobe.runmodel import RunModel, load_model
from ddprobe.safeconsole import PIPE_WIDTH, SafeConsole

# the keys `ddprobe bisect --json` and `sweep --json` wrote before the model (BisectReport /
# SweepReport.to_dict): fields may be added, never dropped
BISECT_KEYS = {"run_id", "run_dir", "budgets", "status", "restarts_used",
               "restarts_this_invocation", "restarts_full_sweep", "rounds", "wall_s",
               "server_s", "verdicts", "groups", "disagreements", "notes"}
GROUP_KEYS = {"name", "hosts", "identity", "rounds", "restarts", "restarts_full_sweep",
              "suspects", "patch_kept", "notes", "verdicts_final", "cells"}
SWEEP_KEYS = {"run_id", "run_dir", "variants", "restarts_used", "wall_s", "rows", "notes",
              "cells"}


def test_importing_the_engine_loads_neither_report_nor_pandas() -> None:
    code = ("import sys, ddprobe.bisect.run, ddprobe.bisect.sweep, ddprobe.bisect.engine, "
            "ddprobe.runmodel; print(sorted(m for m in sys.modules if m == 'pandas' or "
            "m.startswith('ddprobe.report')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "[]"
    # the check can fail: the CSV renderer does load pandas
    code = ("import sys; from ddprobe.report.frame import cells_frame; "
            "from ddprobe.runmodel import build_model; from ddprobe.store import RunRecord; "
            "from pathlib import Path; cells_frame(build_model(RunRecord('r', Path('.')))); "
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "True"


def _stdout_console(buf: io.StringIO) -> SafeConsole:
    """What `ddprobe`'s stdout is when it is not a terminal (safeconsole.make_console)."""
    return SafeConsole(file=buf, no_color=False, highlight=False, soft_wrap=True,
                       width=PIPE_WIDTH)


def _run(capsys: pytest.CaptureFixture[str], runs: Path, *args: str) -> tuple[int, str, Path]:
    code = main(list(args))
    out = capsys.readouterr().out
    (run_dir,) = [p for p in runs.iterdir() if (p / "journal.jsonl").is_file()]
    return code, out, run_dir


def _files_are_the_models(m: RunModel) -> None:
    for fmt, (name, _) in FORMATS.items():
        assert (m.run_dir / name).read_text(encoding="utf-8") == render(m, fmt), name


def test_a_bisect_prints_what_its_reloaded_journal_renders(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Expected (the built-in testbed's seed: b8 passes, b16 crashes): exit 1; the text the
    live run printed is, byte for byte, `render_bisect` of the model loaded from its run
    directory; each report file is that model's rendering."""
    monkeypatch.setenv("DDPROBE_RUNS", str(tmp_path))
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("DDTESTBED_SCENARIO", raising=False)
    code, live, run_dir = _run(capsys, tmp_path, "bisect", "--host", "testbed", "--budgets",
                               "8,16", "--tasks", "reverse_words", "--no-latent-check")
    assert code == int(ExitCode.FAILED)
    m = load_model(run_dir)
    buf = io.StringIO()
    render_bisect(m, _stdout_console(buf))
    assert buf.getvalue() == live
    assert "1. b16: " in live and f"run dir {run_dir}" in live
    assert {v.kind for v in m.verdicts} >= {"ok"} and len(m.verdicts) >= 2
    assert [g.name for g in m.groups] == ["testbed"] and m.groups[0].cells
    assert m.restarts_used == sum(g.restarts for g in m.groups) > 0
    _files_are_the_models(m)
    doc = bisect_doc(m)
    assert set(doc) == BISECT_KEYS and set(doc["groups"][0]) == GROUP_KEYS
    assert doc["groups"][0]["cells"][0]["key"].startswith("b16-graph")  # the frontier first
    assert json.loads(json.dumps(doc)) == doc


def test_a_sweep_prints_what_its_reloaded_journal_renders(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Expected: b8 with graphs passes on the seed (exit 0), one cell, one row."""
    monkeypatch.setenv("DDPROBE_RUNS", str(tmp_path))
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("DDTESTBED_SCENARIO", raising=False)
    code, live, run_dir = _run(capsys, tmp_path, "sweep", "--host", "testbed", "--budgets",
                               "8", "--graph", "on", "--tasks", "reverse_words")
    assert code == 0
    m = load_model(run_dir)
    buf = io.StringIO()
    render_sweep(m, _stdout_console(buf))
    assert buf.getvalue() == live
    assert m.sweep_variants == ("graph",) and [r.budget for r in m.sweep_rows] == [8]
    assert m.sweep_rows[0].entries["graph"]["outcome"] == "ok"
    _files_are_the_models(m)
    doc = sweep_doc(m)
    assert set(doc) == SWEEP_KEYS and len(doc["cells"]) == 1


def test_a_resumed_runs_verdicts_replace_those_of_its_earlier_end(tmp_path: Path) -> None:
    """A run finished with an infrastructure error is resumed: its journal then holds the
    verdicts of both ends; the model (and every view) holds the last end's only."""
    from ddprobe.results import Verdict
    from ddprobe.store import RunStore
    store = RunStore(tmp_path / "r")
    store.append({"type": "run", "run_id": "r", "command": "bisect", "budgets": [8, 16]})
    first = [Verdict("ok", [8], None, "ok", "high", "frontier"),
             Verdict("inconclusive", [16], None, "error", "low", "frontier")]
    for v in first:
        store.verdict(v)
    store.append({"type": "end", "restarts_used": 2, "infra_errors": 1})
    store.append({"type": "note", "text": "resumed at now"})
    store.verdict(first[0])
    store.verdict(Verdict("buffer_sizing", [16], "segfault", "crash", "high", "oversize"))
    store.append({"type": "end", "restarts_used": 4, "infra_errors": 0})
    m = load_model(store.dir)
    assert [(v.kind, v.budgets) for v in m.verdicts] == [("ok", [8]), ("buffer_sizing", [16])]
    assert m.restarts_used == 4


def test_a_smoke_prints_and_writes_junit_from_its_reloaded_journal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Expected: the testbed's production budget passes (exit 0); its table on stdout and its
    JUnit file are those of the model reloaded from the run dir."""
    from ddprobe.report.jsondoc import smoke_doc
    from ddprobe.report.junit import junit_xml
    from ddprobe.report.smoke import render_smoke
    runs = tmp_path / "runs"
    runs.mkdir()
    monkeypatch.setenv("DDPROBE_RUNS", str(runs))
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("DDTESTBED_SCENARIO", raising=False)
    junit = tmp_path / "smoke.xml"
    try:
        code, live, run_dir = _run(capsys, runs, "smoke", "--host", "testbed", "--tasks",
                                   "reverse_words", "--junit", str(junit))
    finally:
        main(["server", "stop", "-H", "testbed"])  # a smoke leaves its server up
        capsys.readouterr()
    assert code == 0
    s = load_model(run_dir).smoke
    assert s is not None and [h.host for h in s.hosts] == ["testbed"]
    assert {c.name.split()[0] for c in s.hosts[0].cases} >= {"facts", "flags", "cell", "probes"}
    buf = io.StringIO()
    render_smoke(s, _stdout_console(buf))
    assert buf.getvalue() == live
    assert junit.read_text(encoding="utf-8") == junit_xml(s)
    assert set(smoke_doc(s)) == {"run_id", "run_dir", "exit_code", "wall_s", "hosts"}
