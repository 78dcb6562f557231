"""Manual bisect (`start`/`good`/`bad`/`skip`/`next`/`visualize`/`reset`) and the session log
as runnable commands.

The seed test: the automatic bisect runs on the built-in testbed (real server restarts), then a
person-shaped driver runs the manual mode: it asks `next`, looks the cell's outcome up in the
automatic run (the outcome a person would have seen running that cell by hand), marks it
(`bad --log <the cell's real server log>` for a crash, `--mode` for garbage) and repeats.
Expected, written before running: the manual mode asks for exactly the cells the automatic
mode ran, in the same order, and ends with the same verdicts (kind, budgets, decided by,
named buffer with its file:line).
"""
from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from ddprobe.cli import main
from ddprobe.exitcodes import ExitCode
from ddprobe.runmodel import build_model
from ddprobe.store import find_run, load_run


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    f = tmp_path / "BISECT_SESSION"
    monkeypatch.setenv("DDPROBE_BISECT_SESSION", str(f))
    return f


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    runs = tmp_path_factory.mktemp("manual-runs")
    old = {k: os.environ.get(k) for k in ("DDPROBE_RUNS", "DDTESTBED_SCENARIO")}
    os.environ["DDPROBE_RUNS"] = str(runs)
    os.environ.pop("DDTESTBED_SCENARIO", None)
    try:
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            # the manual mode plans neither cheap cells nor graph-vs-eager comparisons: the
            # automatic run it is held against runs without them too
            code = main(["bisect", "--host", "testbed", "--budgets", "8,16,32,64", "--json",
                         "--no-cheap-cells", "--no-compare",
                         "--tasks", "reverse_words,is_palindrome,fizzbuzz"])
        doc = json.loads(buf.getvalue())
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert code == int(ExitCode.FAILED)
    doc["record"] = load_run(find_run(doc["run_id"], runs))
    return doc


def _verdicts(vs: list[dict]) -> set[tuple]:
    return {(tuple(v["budgets"]), v["kind"], v["decided_by"],
             (v.get("buffer") or {}).get("attr"), (v.get("buffer") or {}).get("where"))
            for v in vs}


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(list(args))
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_manual_mode_reaches_the_automatic_verdicts_on_the_seed(
        seed_run: dict, session: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = seed_run["record"]
    by_key = {c.plan["key"]: c for c in rec.cells}
    auto_order = [c.plan["key"] for c in rec.cells]
    v16 = next(v for v in seed_run["verdicts"] if v["budgets"] == [16])
    suspect = f"{v16['buffer']['attr']}@{v16['buffer']['where']}"
    small = next(c.config.max_bs for c in rec.cells if c.plan["purpose"] == "max_bs")
    # the server runs with its own max bs (64 on the testbed): the max-bs experiment uses 16
    start = ["bisect", "start", "--budgets", "8,16,32,64", "--suspect", suspect,
             "--small-max-bs", str(small), "--json"]
    code, doc = _json(capsys, *start)
    asked: list[str] = []
    left = [doc["configs_left"]]
    for _ in range(20):
        if doc["done"]:
            break
        key = doc["next"]["key"]
        asked.append(key)
        assert key in by_key, f"manual mode asked for {key}, which the automatic run never ran"
        c = by_key[key]
        if c.outcome.value == "ok":
            args = ["good"]
        elif c.outcome.value == "crash":
            log = rec.dir / "logs" / f"{c.host}-{key}.log"
            assert log.is_file()
            args = ["bad", "--log", str(log)]
        else:
            args = ["bad", "--mode", f"{c.outcome.value} {c.signature.kind}: {c.signature.key}"]
        mcode, doc = _json(capsys, "bisect", *args, "--json")
        assert mcode == 0
        left.append(doc["configs_left"])
    assert doc["done"] and asked == auto_order
    code, _ = _json(capsys, "bisect", "next", "--json")
    assert code == int(ExitCode.FAILED)
    assert all(a >= b for a, b in zip(left, left[1:], strict=False)) and left[-1] == 0
    assert _verdicts(doc["verdicts"]) == _verdicts(seed_run["verdicts"])
    # visualize shows every budget; reset ends the session
    assert main(["bisect", "visualize"]) == 0
    vis = capsys.readouterr().out
    assert "b16    graph  bad" in vis and "-> buffer_sizing (oversize experiment" in vis
    assert main(["bisect", "reset"]) == 0 and not session.exists()


def test_the_log_of_an_automatic_run_is_runnable_commands(
        seed_run: dict, session: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run each line of `bisect log RUN_ID` as a ddprobe command: the manual session it builds
    has the automatic run's verdicts, file:line included."""
    assert main(["bisect", "log", str(seed_run["record"].dir)]) == 0
    log = capsys.readouterr().out
    cmds = [ln for ln in log.splitlines() if ln.strip() and not ln.startswith("#")]
    assert cmds[0].startswith("ddprobe bisect start ") and "--suspect cuda_graph_custom_mask@" \
        "srt/layers/attention/triton_backend.py:" in cmds[0]
    for ln in cmds:
        words = shlex.split(ln)
        assert words[0] == "ddprobe"
        assert main(words[1:] + ["--json"]) == 0, ln
        capsys.readouterr()
    code, doc = _json(capsys, "bisect", "next", "--json")
    assert doc["done"] and code == int(ExitCode.FAILED)
    assert _verdicts(doc["verdicts"]) == _verdicts(seed_run["verdicts"])
    # and `bisect log` without a run id prints the session in progress, itself replayable
    assert main(["bisect", "log"]) == 0
    again = capsys.readouterr().out
    f = session.parent / "again.log"
    f.write_text(again)
    code, rep = _json(capsys, "bisect", "replay", str(f), "--json")
    got = {(tuple(v["budgets"]), v["kind"], (v.get("buffer") or {}).get("where"))
           for v in rep["verdicts"]}
    assert got == {(b, k, w) for b, k, _, _, w in _verdicts(seed_run["verdicts"])}


@pytest.mark.parametrize("args,msg", [
    (["bisect", "next"], "no manual bisect in progress"),
    (["bisect", "good"], "no manual bisect in progress"),
    (["bisect", "start", "--budgets", "8,x"], "--budgets"),
    (["bisect", "start", "--budgets", "8", "--order", "sideways"],
     "'sideways' is not one of 'auto', 'eager-first', 'graph-first'"),
])
def test_manual_usage_errors_are_one_line(args: list[str], msg: str, session: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(args)
    err = capsys.readouterr().err
    assert code in (int(ExitCode.USAGE), int(ExitCode.CONFIG)) and msg in err
    assert "Traceback" not in err and not session.exists()


def test_marks_by_budget_and_flags_and_their_errors(session: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bisect", "start", "--budgets", "8,16"]) == 0
    assert main(["bisect", "start", "--budgets", "8,16"]) == int(ExitCode.USAGE)
    assert "already in progress" in capsys.readouterr().err
    assert main(["bisect", "bad", "16", "--mode", "garbage"]) == 0
    assert main(["bisect", "good", "8"]) == 0
    assert main(["bisect", "bad", "12"]) == int(ExitCode.CONFIG)
    assert "budget 12 is not one of this bisect's budgets (8,16)" in capsys.readouterr().err
    assert main(["bisect", "good", "16", "--no-graph"]) == 0  # the eager control passes
    text = session.read_text()
    assert "ddprobe bisect good b16-eager" in text
    assert "ddprobe bisect bad b16-graph --mode garbage" in text
    capsys.readouterr()
    code, doc = _json(capsys, "bisect", "next", "--json")
    # no suspects given: graph-related, and with no buffer to enlarge the max-bs cell decides
    assert not doc["done"] and doc["next"]["key"] == "b16-graph-bs8"
    assert main(["bisect", "skip", "--refused", "unknown flag"]) == 0
    assert "--refused 'unknown flag'" in session.read_text()
    # the max-bs cell could not run: graph-related (eager passes), nothing more to tell
    capsys.readouterr()
    code, doc = _json(capsys, "bisect", "next", "--json")
    assert doc["done"] and [v["kind"] for v in doc["verdicts"] if v["budgets"] == [16]] == [
        "inconclusive"] and code == int(ExitCode.INCONCLUSIVE)


def test_reports_of_the_seed_run_carry_each_failing_cells_evidence(seed_run: dict) -> None:
    """The md and HTML reports of the real seed run: every failing cell has its launch argv,
    the server's effective config and a bounded excerpt of its own server log; verdicts link
    to the cells they cite and the cells link back. Text glitches of issue 16 are gone."""
    import re as _re

    from ddprobe.report.html import render_html
    from ddprobe.report.markdown import render_markdown
    rec = seed_run["record"]
    md = render_markdown(build_model(rec))
    html = render_html(build_model(rec))
    failing = [(i, c) for i, c in enumerate(rec.cells, 1) if c.outcome.value != "ok"]
    assert len(failing) >= 4
    for i, _c in failing:
        sect = md.split(f'<a id="cell-{i}"></a>', 1)[1].split('<a id="cell-', 1)[0]
        assert "- launch: `" in sect and "--port" in sect
        assert "- effective config (from " in sect
        assert "Server log (last 40 lines at most)" in sect
        log_lines = sect.split("```text\n", 1)[1].split("\n```", 1)[0].splitlines()
        assert 0 < len(log_lines) <= 41  # 40 lines and at most one "left out" note
        assert f'id="cell-{i}"' in html
    b16 = next(i for i, c in failing if c.plan["key"] == "b16-graph")
    sect16 = md.split(f'<a id="cell-{b16}"></a>', 1)[1].split('<a id="cell-', 1)[0]
    assert "illegal memory access" in sect16 and "cited by: [verdict" in sect16
    # every in-page link has a target, both ways
    for doc, pat, ids in ((md, r"\]\(#([a-z]+-\d+)\)", r'<a id="([a-z]+-\d+)"></a>'),
                          (html, r'href="#([a-z]+-\d+)"', r'id="([a-z]+-\d+)"')):
        targets = set(_re.findall(ids, doc))
        links = set(_re.findall(pat, doc))
        assert links and links <= targets, links - targets
        assert any(x.startswith("verdict-") for x in links)
        assert any(x.startswith("cell-") for x in links)
    for doc in (md, html):
        assert "garbage: garbage:" not in doc and "(none passed)" not in doc


def test_readme_expected_output_is_what_the_seed_bisect_prints(seed_run: dict) -> None:
    """The README's quick-start table (5 columns) against the real seed run: the same verdict,
    decided-by and confidence per budget, and the same named buffer with its file:line."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Quick start", 1)[1]
    rows = [ln for ln in block.split("┡", 1)[1].split("└", 1)[0].splitlines()
            if ln.startswith("│")]
    assert "┃ budgets ┃ verdict ┃ what ┃ decided by ┃ confidence ┃" in \
        " ".join(block.split()).replace("┃ ┃", "┃")
    got = []  # a budget may carry two verdicts (a cure that leaves a second defect)
    for ln in rows:
        cells = [c.strip() for c in ln.strip("│").split("│")]
        got.append(cells)
    want = seed_run["verdicts"]
    assert len(got) == len(want)
    for (b, kind, what, decided, conf), v in zip(got, want, strict=False):
        assert b == ",".join(map(str, v["budgets"]))
        assert (kind, decided, conf) == (v["label"] if "label" in v else v["kind"],
                                         v["decided_by"], v["confidence"]), b
        if (v.get("buffer") or {}).get("attr"):
            assert what == f"{v['buffer']['attr']} ({v['buffer']['where']})"


def test_a_hand_named_suspect_is_not_dressed_up_as_analysis(session: Path,
                                                           capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    assert main(["bisect", "start", "--budgets", "8,16", "--suspect", "mask@x/attn.py:7"]) == 0
    for args in (["bad", "--mode", "crash cuda_illegal_address: boom"], ["good"],
                 ["good", "16", "--oversize", "mask"]):
        assert main(["bisect", *args]) == 0
    capsys.readouterr()
    code, doc = _json(capsys, "bisect", "next", "--json")
    (v,) = [v for v in doc["verdicts"] if v["budgets"] == [16]]
    static = next(e["summary"] for e in v["evidence"] if e["kind"] == "static")
    assert "mask (x/attn.py:7): named as a suspect (--suspect)" in static
    assert "`?`" not in static and "sizes ;" not in static and not static.endswith("sizes ")
    assert v["kind"] == "buffer_sizing" and v["buffer"]["where"] == "x/attn.py:7"


def test_manual_plan_and_ok_verdict_say_graph_output_was_not_compared(
        session: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a good mark carries no answers: the manual mode cannot compare graph with eager, so
    # its start says so, and so does the ok verdict (never a silent "works")
    assert main(["bisect", "start", "--budgets", "8,16"]) == 0
    out = capsys.readouterr().out
    assert "graph vs eager not compared (a manual bisect" in out
    assert "--differential" in out
    code, doc = _json(capsys, "bisect", "good", "--json")
    assert code == 0 and doc["done"]
    ok = [v for v in doc["verdicts"] if v["kind"] == "ok" and v["tested"]]
    assert ok and any("graph output not compared with eager (a manual bisect" in e["summary"]
                      for e in ok[0]["evidence"])
