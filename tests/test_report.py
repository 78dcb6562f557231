"""Report rendering from real journals written with RunStore: the seed's matrix and verdicts.

The fixture run is the seed case (shared/seed): b8 graph ok (accept 4.5, 285 tok/s); b16 graph
crash (cudaErrorIllegalAddress); b32 graph garbage (accept 1.0, coding 0/20); b64 graph crash
(cuBLAS); b16 eager ok (accept 5.9, 111 tok/s); verdicts 16 buffer sizing, 32 graph capture,
64 buffer sizing.
"""
from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pandas as pd
import pytest
from report_util import (
    ILLEGAL,
    _cell,
    seed_cells,
    write_seed_run,
)
from rich.console import Console

from ddprobe.cli import main
from ddprobe.errors import ConfigError
from ddprobe.report import (
    build_model,
    render_csv,
    render_html,
    render_json,
    render_markdown,
    render_terminal,
    resolve_run,
    write_reports,
)
from ddprobe.report.style import OUTCOME_STYLE, VERDICT_STYLE
from ddprobe.results import VERDICT_KINDS, CellResult, Outcome, Verdict
from ddprobe.runmodel import load_model
from ddprobe.store import load_run


@pytest.fixture()
def seed_run(tmp_path: Path) -> Path:
    return write_seed_run(tmp_path / "runs")


def test_model_matrix_is_the_seed_grid(seed_run: Path) -> None:
    m = build_model(load_run(seed_run))
    (hm,) = m.matrices
    assert hm.budgets == (8, 16, 32, 64) and hm.modes == ("graph", "eager")
    got = {(b, mode): hm.get(b, mode).outcome for b in hm.budgets for mode in hm.modes}
    assert got == {(8, "graph"): "ok", (16, "graph"): "crash", (32, "graph"): "garbage",
                   (64, "graph"): "crash", (8, "eager"): "not-run", (16, "eager"): "ok",
                   (32, "eager"): "not-run", (64, "eager"): "not-run"}
    assert hm.get(16, "graph").signature == ILLEGAL.id
    assert hm.get(8, "graph").accept == 4.5 and hm.get(16, "eager").tok_s == 111.0
    assert m.restarts_used == 5 and m.restarts_full_sweep == 8
    assert [p.value for p in m.accept_series[0].points] == [4.5, None, 1.0, None]


def test_patched_and_max_bs_cells_are_variants_not_the_base(tmp_path: Path) -> None:
    extra = [_cell(16, True, Outcome.OK, accept=5.8, tok_s=280.0, passed=20,
                   patches=("ddtestbed-custom-mask",)),
             _cell(64, True, Outcome.OK, accept=6.0, tok_s=300.0, passed=20, max_bs=32)]
    m = build_model(load_run(write_seed_run(tmp_path, extra=extra)))
    e16, e64 = m.matrices[0].get(16, "graph"), m.matrices[0].get(64, "graph")
    assert e16.outcome == "crash" and [v.variant for v in e16.variants] == [
        "patch ddtestbed-custom-mask"]
    assert e16.variants[0].outcome == "ok"
    assert e64.outcome == "crash" and e64.variants[0].variant == "max bs 32"


def test_repeats_that_disagree_are_flaky(tmp_path: Path) -> None:
    extra = [_cell(8, True, Outcome.CRASH, sig=ILLEGAL)]
    m = build_model(load_run(write_seed_run(tmp_path, extra=extra)))
    e8 = m.matrices[0].get(8, "graph")
    assert e8.outcome == "flaky" and len(e8.cells) == 2


def test_markdown_has_verdicts_matrix_and_buffer(seed_run: Path) -> None:
    md = render_markdown(load_model(seed_run))
    assert "### 1. buffer sizing: budget 16" in md
    assert "### 2. graph capture: budget 32" in md
    assert "### 3. buffer sizing: budget 64" in md
    assert "`cuda_graph_custom_mask` at `srt/layers/attention/triton_backend.py:101`" in md
    assert "b8 18.0 MiB, b16 18.0 MiB (short by 16777216 elements)" in md
    row16 = next(line for line in md.splitlines() if line.startswith("| 16 |"))
    assert "**crash**" in row16 and "**ok** accept 5.90, 111 tok/s, coding 20/20" in row16
    assert "5 restarts (a full sweep: 8)" in md


def test_json_round_trips_cells_and_verdicts(seed_run: Path) -> None:
    rec = load_run(seed_run)
    doc = json.loads(render_json(build_model(rec)))
    assert doc["schema_version"] == 1 and doc["run_id"] == rec.run_id
    assert [c["outcome"] for c in doc["cells"]] == ["ok", "crash", "garbage", "crash", "ok"]
    assert [CellResult.from_dict(c) for c in doc["cells"]] == rec.cells
    assert [Verdict.from_dict(v) for v in doc["verdicts"]] == rec.verdicts
    cell = next(x for x in doc["matrix"] if x["budget"] == 32 and x["mode"] == "graph")
    assert cell["outcome"] == "garbage" and cell["accept_length"] == 1.0


def test_csv_is_one_row_per_cell_through_pandas(seed_run: Path) -> None:
    df = pd.read_csv(io.StringIO(render_csv(load_model(seed_run))))
    assert len(df) == 5
    assert list(df["key"]) == ["b8-graph", "b16-graph", "b32-graph", "b64-graph", "b16-eager"]
    assert list(df["outcome"]) == ["ok", "crash", "garbage", "crash", "ok"]
    assert df.loc[df["key"] == "b8-graph", "tok_s"].item() == 285.0
    assert df.loc[df["key"] == "b32-graph", "coding_passed"].item() == 0
    assert df.loc[df["key"] == "b16-graph", "signature_kind"].item() == "cuda_illegal_address"


def test_terminal_shows_matrix_and_verdicts(seed_run: Path) -> None:
    buf = io.StringIO()
    render_terminal(load_model(seed_run), Console(file=buf, width=140, no_color=True))
    text = buf.getvalue()
    assert "budget x CUDA graph" in text and "cuda graph off" in text
    assert "1. buffer sizing" in text and "2. graph capture" in text
    assert "cuda_graph_custom_mask at srt/layers/attention/triton_backend.py:101" in text
    assert "garbage" in text and "acc 4.50 285 tok/s 20/20" in text


def test_write_reports_writes_the_four_files(seed_run: Path) -> None:
    paths = write_reports(load_model(seed_run))
    assert set(paths) == {"md", "json", "csv", "html"}
    assert {p.name for p in paths.values()} == {"report.md", "report.json", "cells.csv",
                                                "report.html"}
    for p in paths.values():
        assert p.parent == seed_run and p.stat().st_size > 200
    assert not [p for p in seed_run.iterdir() if p.name.startswith(".")]  # no temp files left


def test_unfinished_run_renders_and_says_so(tmp_path: Path) -> None:
    rec = load_run(write_seed_run(tmp_path, finished=False))
    md = render_markdown(build_model(rec))
    assert "unfinished" in md and "No verdicts recorded." in md
    assert build_model(rec).finished is False


def test_resolve_run_prefix_latest_and_errors(tmp_path: Path) -> None:
    a = write_seed_run(tmp_path, run_id="20261129-100000-bisect-aaaa")
    b = write_seed_run(tmp_path, run_id="20261129-110000-sweep-bbbb")
    assert resolve_run("latest", tmp_path) == b
    assert resolve_run("20261129-10", tmp_path) == a
    assert resolve_run(str(a), tmp_path) == a
    with pytest.raises(ConfigError, match="matches 2 runs"):
        resolve_run("20261129", tmp_path)
    with pytest.raises(ConfigError, match="no run 'nope'"):
        resolve_run("nope", tmp_path)


def test_cli_report_formats_and_output(seed_run: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPROBE_RUNS", str(seed_run.parent))
    assert main(["report", "latest", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["run_id"] == seed_run.name
    out = tmp_path / "r.csv"
    assert main(["report", seed_run.name[:15], "--format", "csv", "--output", str(out)]) == 0
    assert len(pd.read_csv(out)) == 5
    assert main(["report", "latest", "--format", "md"]) == 0
    assert "### 1. buffer sizing: budget 16" in capsys.readouterr().out
    assert main(["report", "latest"]) == 0  # term
    assert "graph capture" in capsys.readouterr().out
    txt = tmp_path / "r.txt"
    assert main(["report", "latest", "--output", str(txt)]) == 0
    assert "2. graph capture" in txt.read_text() and "\x1b[" not in txt.read_text()
    assert not (seed_run / "report.html").exists()  # re-rendering to stdout writes nothing


def test_cli_report_unknown_run_is_one_line_config_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPROBE_RUNS", str(tmp_path))
    assert main(["report", "nothing-here"]) == 3
    err = capsys.readouterr().err
    assert "no run 'nothing-here'" in err and "Traceback" not in err
    write_seed_run(tmp_path)
    assert main(["report", "latest", "--format", "pdf"]) == 2


def test_cli_report_all_writes_into_the_run_dir(seed_run: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPROBE_RUNS", str(seed_run.parent))
    before = (seed_run / "journal.jsonl").read_bytes()
    assert main(["report", "latest", "--format", "all"]) == 0
    assert (seed_run / "report.html").is_file() and (seed_run / "cells.csv").is_file()
    assert (seed_run / "journal.jsonl").read_bytes() == before  # re-render never edits it
    assert str(seed_run / "report.html") in capsys.readouterr().err
    assert os.access(seed_run / "report.md", os.R_OK)


def test_two_hosts_get_two_grids_and_their_disagreements(tmp_path: Path) -> None:
    other = [c for c in seed_cells(host="rtxpro") if c.config.budget != 32]
    other.append(_cell(32, True, Outcome.OK, accept=6.1, tok_s=150.0, passed=20,
                       host="rtxpro"))  # sm_120: b32 works after the mask fix (the seed)
    rec = load_run(write_seed_run(tmp_path, extra=other))
    m = build_model(rec)
    assert [hm.host for hm in m.matrices] == ["b300", "rtxpro"]
    assert m.disagreements == ("b32 graph: b300 garbage, rtxpro ok",)
    assert [s.name for s in m.accept_series] == ["b300 graph", "b300 eager", "rtxpro graph",
                                                 "rtxpro eager"]
    html = render_html(build_model(rec))
    assert html.count('<table class="grid"') == 2
    assert 'data-host="rtxpro" data-budget="32" data-graph="on" data-outcome="ok"' in html
    assert "hosts disagree: b32 graph: b300 garbage, rtxpro ok" in html
    assert "- b32 graph: b300 garbage, rtxpro ok" in render_markdown(build_model(rec))


def test_every_verdict_kind_and_outcome_has_its_own_colour() -> None:
    """The style table covers each vocabulary's values (no kind falls back to another's)."""
    assert set(VERDICT_STYLE) == set(VERDICT_KINDS)
    assert {o.value for o in Outcome} <= set(OUTCOME_STYLE)
