"""A run dir written by ddprobe before CellResult had typed fields (everything a layer added
lived in `CellResult.extra`) still loads: the old keys become the typed fields, the journal's
cell events come back unchanged, and the reports rendered from it are the ones it wrote.

tests/data/journal-old-bisect is `ddprobe bisect --host testbed --budgets 8,16` as run by
commit 5a2cf18 (renovation step 1), kept whole."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from ddprobe.report import write_reports
from ddprobe.results import CellResult, Outcome
from ddprobe.store import load_run

OLD = Path(__file__).parent / "data" / "journal-old-bisect"
RUN_ID = "20261201-132619-bisect-f49d"


def _events(kind: str) -> list[dict]:
    lines = (OLD / "journal.jsonl").read_text(encoding="utf-8").splitlines()
    return [e for e in map(json.loads, lines) if e["type"] == kind]


def _copy(tmp_path: Path) -> Path:
    run = tmp_path / RUN_ID
    shutil.copytree(OLD, run)
    return run


def test_the_old_cells_load_into_typed_fields(tmp_path: Path) -> None:
    rec = load_run(_copy(tmp_path))
    assert rec.finished and len(rec.cells) == 3 and len(rec.verdicts) == 2
    by_key = {c.plan["key"]: c for c in rec.cells if c.plan}
    assert list(by_key) == ["b16-graph", "b8-graph", "b16-graph+oversize[cuda_graph_custom_mask]"]
    b16, b8, over = by_key.values()
    assert [c.round for c in rec.cells] == [1, 2, 3]
    assert [c.purpose for c in rec.cells] == ["frontier", "frontier", "oversize"]
    assert {c.group for c in rec.cells} == {"85cfd6bf"}
    assert b16.outcome is Outcome.CRASH and b16.phase == "serving"
    assert b16.log_signature == "cuda_illegal_address: CUDA error: an illegal memory access " \
                                "was encountered"
    assert b16.hint and "compute-sanitizer" in b16.hint
    assert b8.outcome is Outcome.OK and b8.hint is None and b8.model_loaded is True
    assert b8.decode is not None and b8.decode["accept_len_mean"] == 4.6
    for c in rec.cells:
        assert c.wall_s is not None and c.wall_s > 0
        assert c.local_log and c.local_log.endswith(".log")
        assert c.launch and "ddtestbed.launch_server" in c.launch
        assert c.health is not None and c.health["status"] == "healthy"
        assert c.stop is not None and c.flags_checked is True and c.preflight == "ok"
        assert c.server_info_path == "/server_info"
        assert c.extra == {}, c.extra  # every key the old version wrote has a field now
    assert over.plan is not None and over.plan["buffers"] == ["cuda_graph_custom_mask"]


def test_the_old_cell_events_come_back_unchanged() -> None:
    for old in _events("cell"):
        cell = CellResult.from_dict({k: v for k, v in old.items() if k != "type"})
        assert {"type": "cell", **cell.to_dict()} == old


def test_an_unknown_extra_key_is_kept_and_written_back() -> None:
    old = _events("cell")[0]
    doc = {k: v for k, v in old.items() if k != "type"}
    doc["extra"] = dict(doc["extra"], captured_bs=[1, 2, 4], some_future_key={"a": 1})
    cell = CellResult.from_dict(doc)
    assert cell.extra == {"captured_bs": [1, 2, 4], "some_future_key": {"a": 1}}
    assert cell.to_dict()["extra"] == doc["extra"]


def test_the_reports_of_the_old_run_render_as_it_wrote_them(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    names = ("report.md", "cells.csv", "report.html", "report.json")
    for name in names:
        (run / name).unlink()
    write_reports(load_run(run))
    for name in ("report.md", "cells.csv", "report.html"):
        assert (run / name).read_text(encoding="utf-8") == \
            (OLD / name).read_text(encoding="utf-8"), name
    assert json.loads((run / "report.json").read_text(encoding="utf-8")) == \
        json.loads((OLD / "report.json").read_text(encoding="utf-8"))
