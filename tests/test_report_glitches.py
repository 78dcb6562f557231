"""Text glitches of issue 16, each pinned: "garbage: garbage:", "testbed testbed:", "keep budget
<= (none passed)", a numbered verdict list starting at "2.", and a hostile server log in the
reports (escaped, bounded)."""
from __future__ import annotations

import io
from pathlib import Path

from planner_util import seed, spec
from report_util import bisect_model
from rich.console import Console

from ddprobe.bisect.engine import Event
from ddprobe.bisect.planner import simulate
from ddprobe.bisect.synthetic import threshold
from ddprobe.bisect.verdicts import build_verdicts
from ddprobe.report.live import EventRenderer
from ddprobe.report.style import failure_text
from ddprobe.report.terminal import render_bisect
from ddprobe.results import CellResult, Config, Outcome, Signature
from ddprobe.runmodel import build_model
from ddprobe.store import RunStore, load_run


def test_failure_text_never_repeats_the_outcome() -> None:
    assert failure_text("garbage", "garbage: accept_length=1.01 coding 0/8") == \
        "garbage: accept_length=1.01 coding 0/8"
    assert failure_text("crash", "cuda_illegal_address: CUDA error") == \
        "crash: cuda_illegal_address: CUDA error"
    assert failure_text("hang", None) == "hang"


def test_progress_lines_name_a_one_host_group_once() -> None:
    buf = io.StringIO()
    ren = EventRenderer(Console(file=buf, width=200))
    res = CellResult("testbed", Config(16), Outcome.OK, wall_s=3)
    ren(Event("cell_done", "testbed", "testbed: b16-graph", {"result": res}))
    ren(Event("cell_done", "a,b", "a: b16-graph", {"result": res}))
    out = buf.getvalue()
    assert "testbed testbed:" not in out and "testbed: b16-graph: ok" in out
    assert "a,b a: b16-graph" in out  # a group of several hosts still says which


def test_no_passing_budget_gives_no_keep_budget_clause() -> None:
    s = spec()
    p, _ = simulate(s, threshold(s, 8, "buffer"))  # every budget fails
    nxt = [v.next_step for v in build_verdicts(p) if v.kind != "ok"]
    assert nxt and all("(none passed)" not in n and "keep budget <=" not in n for n in nxt)
    assert any("no budget passed with CUDA graphs" in n for n in nxt)


def test_verdict_list_is_numbered_from_one(tmp_path: Path) -> None:
    p, _ = simulate(spec(), seed)
    vs = build_verdicts(p, host="h")
    buf = io.StringIO()
    render_bisect(bisect_model(tmp_path, vs, [8, 16, 32, 64]), Console(file=buf, width=300))
    out = buf.getvalue()
    # b64 carries two verdicts (the workspace, and once cured, b32's mode): 4 in all
    assert "\n1. b16: " in out and "\n2. b32: " in out and "\n3. b64: " in out
    assert "\n4. b64: graph_capture " in out
    assert "5. " not in out and "0. " not in out and "garbage: garbage:" not in out


def test_a_hostile_server_log_is_escaped_and_bounded(tmp_path: Path) -> None:
    from ddprobe.report.html import render_html
    from ddprobe.report.markdown import render_markdown
    store = RunStore.create("bisect", tmp_path / "runs")
    store.append({"type": "run", "run_id": store.run_id, "command": "bisect", "hosts": ["h"],
                  "budgets": [16], "started_at": "now", "options": {}})
    c = CellResult("h", Config(16), Outcome.CRASH, Signature("segfault", "boom"),
                   plan={"key": "b16-graph"}, launch=["python", "-m", "x"])
    store.cell(c)
    evil = "".join(f"line {i}\n" for i in range(5000)) + \
        "</pre><script>alert(1)</script>\n```\n\x1b[2Jcleared\n<img src=x onerror=alert(1)>\n"
    (store.dir / "logs").mkdir(exist_ok=True)
    (store.dir / "logs" / "h-b16-graph.log").write_text(evil)
    rec = load_run(store.dir)
    html = render_html(build_model(rec))
    md = render_markdown(build_model(rec))
    assert "<script>" not in html and "<img src" not in html and "\x1b" not in html
    assert "&lt;/pre&gt;&lt;script&gt;" in html
    block = md.split("Server log", 1)[1]
    fence = block.split("\n", 3)[2].split("text")[0]
    assert len(fence) >= 4  # longer than the ``` inside the log
    assert block.count("\nline ") <= 40 and "line 4999" in block and "line 10\n" not in block
    assert "\x1b" not in md
