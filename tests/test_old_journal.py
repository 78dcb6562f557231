"""A run dir written by ddprobe before CellResult had typed fields (everything a layer added
lived in `CellResult.extra`) still loads: the old keys become the typed fields, the journal's
cell events come back unchanged, and the reports rendered from it are the ones it wrote.

tests/data/journal-old-bisect is `ddprobe bisect --host testbed --budgets 8,16` as run by
commit 5a2cf18 (renovation step 1), kept whole."""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ddprobe.bisect.cells import PlannedCell
from ddprobe.bisect.engine import GroupRun, replay_journal
from ddprobe.bisect.groups import HostGroup, Identity
from ddprobe.cli import main
from ddprobe.errors import ConfigError
from ddprobe.exitcodes import ExitCode
from ddprobe.report import write_reports
from ddprobe.results import CellResult, Outcome
from ddprobe.runmodel import load_model
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
    write_reports(load_model(run))
    for name in ("report.md", "cells.csv", "report.html"):
        assert (run / name).read_text(encoding="utf-8") == \
            (OLD / name).read_text(encoding="utf-8"), name
    assert json.loads((run / "report.json").read_text(encoding="utf-8")) == \
        json.loads((OLD / "report.json").read_text(encoding="utf-8"))


def _edit(run: Path, line_type: str, change: Callable[[dict[str, Any]], None],
          *, drop_end: bool = False) -> int:
    """Change the first event of `line_type` in the run's journal; its 1-based line number."""
    j = run / "journal.jsonl"
    events = [json.loads(x) for x in j.read_text(encoding="utf-8").splitlines()]
    n = next(i for i, e in enumerate(events) if e["type"] == line_type)
    change(events[n])
    if drop_end:
        events = [e for e in events if e["type"] != "end"]
    j.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return n + 1


def _set(*path: str | int, value: str) -> Callable[[dict[str, Any]], None]:
    def change(ev: Any) -> None:
        for k in path[:-1]:
            ev = ev[k]
        ev[path[-1]] = value
    return change


@pytest.mark.parametrize("line_type,path,value", [
    ("verdict", ("kind",), "buffer_sizng"),
    ("verdict", ("confidence",), "certain"),
    ("verdict", ("reason",), "preloaded"),
    ("verdict", ("evidence", 0, "kind"), "hunch"),
    ("cell", ("kind",), "memcheck"),
    ("cell", ("outcome",), "exploded"),
    ("cell", ("extra", "purpose"), "frontiers"),
])
def test_an_unknown_kind_or_status_in_a_journal_is_one_line_naming_file_and_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        line_type: str, path: tuple[str | int, ...], value: str) -> None:
    run = _copy(tmp_path)
    n = _edit(run, line_type, _set(*path, value=value))
    monkeypatch.setenv("DDPROBE_RUNS", str(tmp_path))
    with pytest.raises(ConfigError) as e:
        load_run(run)
    key = ".".join((line_type, *(k for k in path if isinstance(k, str))))
    assert str(e.value).startswith(f"{run / 'journal.jsonl'}:{n}: unknown {key} '{value}' "
                                   "(known: ")
    assert e.value.key == key and e.value.line == n
    capsys.readouterr()
    assert main(["report", RUN_ID]) == ExitCode.CONFIG == 3
    err = capsys.readouterr().err
    assert f"journal.jsonl:{n}: unknown {key} '{value}'" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command,key,value", [("bisect", "order", "sideways"),
                                               ("sweep", "graph", "bth")])
def test_an_unknown_value_in_a_resumed_runs_options_is_a_config_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        command: str, key: str, value: str) -> None:
    run = _copy(tmp_path)

    def change(ev: dict[str, Any]) -> None:
        ev["command"] = command
        ev["options"][key] = value

    _edit(run, "run", change, drop_end=True)
    monkeypatch.setenv("DDPROBE_RUNS", str(tmp_path))
    assert main([command, "--resume", RUN_ID]) == ExitCode.CONFIG
    err = capsys.readouterr().err
    assert f"{run / 'journal.jsonl'}: unknown run.options.{key} '{value}'" in err
    assert "Traceback" not in err


class _Recorder:
    """A plan that keeps what the journal replays into it."""

    def __init__(self) -> None:
        self.recorded: list[tuple[PlannedCell, CellResult]] = []

    def next_cells(self, k: int = 1) -> list[PlannedCell]:
        return []

    def record(self, cell: PlannedCell, result: CellResult) -> None:
        self.recorded.append((cell, result))

    def remaining(self) -> tuple[int, int]:
        return 0, 0


def test_a_resumed_journal_replays_its_plans_and_refuses_an_unknown_purpose(
        tmp_path: Path) -> None:
    run = _copy(tmp_path)
    group = HostGroup(Identity("gpu", "drv", "ddtestbed", "0.1.0"), key="85cfd6bf")
    plan = _Recorder()
    replay_journal(plan, load_run(run), group.key, GroupRun(group))
    assert [pc.purpose for pc, _ in plan.recorded] == ["frontier", "frontier", "oversize"]
    _edit(run, "cell", _set("extra", "plan", "purpose", value="sanitise"))
    with pytest.raises(ConfigError) as e:
        replay_journal(_Recorder(), load_run(run), group.key, GroupRun(group))
    assert str(e.value).startswith(f"{run / 'journal.jsonl'}: unknown cell.extra.plan.purpose "
                                   "'sanitise' (known: frontier, eager, ")
