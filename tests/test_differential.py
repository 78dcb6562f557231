"""The graph-vs-eager differential (ddprobe/probes/differential.py) and `run --differential`.

Pure comparisons on hand-made answers first; then the CPU testbed's `stale` scenario (defect
(g): the verify pass's logit scale captured into the graph from the dummy batch) run for real.

Expected answers, written before the runs:
  * identical answers -> `same`; the graph cell keeps its outcome.
  * one flipped token -> `diverged` at that token of /generate and that char of the chat answer;
    the graph cell becomes garbage ("graph-eager divergence") although coding passed.
  * a backend without a deterministic mode -> `not_decisive`: reported, the cell not failed.
  * `--enable-deterministic-inference` in both launches -> `diverged` with no caveat.
  * a "graph" cell the server says ran without graphs -> `incomparable`, nothing changed.
  * host text with control characters is escaped, long answers bounded.
  * stale scenario on the CPU testbed: b8 graph == eager; b16 graph garbage by the
    differential, coding all passing in both, acceptance within a few percent.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddprobe.effective import EffectiveConfig
from ddprobe.probes import differential as D
from ddprobe.results import CellResult, Config, Outcome, ProbeSummary

ANSWER = "```python\ndef add(a, b):\n    return a + b\n```"
FLIPPED = "```python\ndef add(a,  b):\n    return a + b\n```"


def cell(graph: bool, texts: dict[str, str], ids: dict[str, list[int]] | None = None, *,
         backend: str | None = None, launch: tuple[str, ...] = (),
         ran_graph: bool | None = None) -> CellResult:
    c = CellResult("h", Config(16, graph=graph, backend=backend), Outcome.OK,
                   probes=ProbeSummary(passed=len(texts), total=len(texts)),
                   answers=dict(texts), answer_ids=dict(ids or {}), launch=list(launch),
                   notes=[])
    if ran_graph is not None:
        c.effective = EffectiveConfig(cuda_graph=ran_graph, attention_backend=backend)
    return c


def test_identical_answers_are_the_same_and_change_nothing() -> None:
    g, e = cell(True, {"add": ANSWER}, {"add": [1, 2, 3]}), cell(False, {"add": ANSWER},
                                                                {"add": [1, 2, 3]})
    d = D.apply(g, e)
    assert d.status == D.SAME and d.compared == 1 and d.tokens_compared == 3
    assert g.outcome is Outcome.OK and g.signature is None
    assert d.summary == ("graph vs eager: greedy answers identical in all 1 tasks (3 "
                         "/generate tokens compared id by id)")


def test_a_flipped_token_makes_the_graph_cell_garbage_even_with_coding_passing() -> None:
    g = cell(True, {"add": FLIPPED, "b": "x"}, {"add": [5, 6, 7, 8], "b": [1]})
    e = cell(False, {"add": ANSWER, "b": "x"}, {"add": [5, 6, 9, 8], "b": [1]})
    d = D.apply(g, e)
    assert d.status == D.DIVERGED and len(d.diverged) == 1
    x = d.diverged[0]
    assert (x.task, x.token, x.char) == ("add", 2, ANSWER.index(" b)") + 1)
    assert x.graph_ids == (5, 6, 7, 8) and x.eager_ids == (5, 6, 9, 8)
    assert "a,  b" in x.graph_at and "a, b" in x.eager_at
    assert g.outcome is Outcome.GARBAGE and g.signature is not None
    assert g.signature.key == "graph-eager divergence"
    assert g.probes is not None and g.probes.passed == g.probes.total  # coding passed
    assert g.differential["status"] == "diverged"
    assert e.differential["status"] == "diverged" and e.outcome is Outcome.OK
    assert "token 2 of /generate" in d.summary and "1/2 greedy answers differ" in d.summary
    assert "--enable-deterministic-inference is off (the default backend" in d.note


def test_a_backend_without_a_deterministic_mode_is_reported_not_failed() -> None:
    g = cell(True, {"add": FLIPPED}, backend="torch_native")
    e = cell(False, {"add": ANSWER}, backend="torch_native")
    d = D.apply(g, e, backends=("flashinfer", "fa3", "triton"))  # 0.5.11's list
    assert d.status == D.NOT_DECISIVE and g.outcome is Outcome.OK
    assert "torch_native has no deterministic mode in this SGLang (its " \
        "--enable-deterministic-inference backends: flashinfer, fa3, triton)" in d.summary
    # the host's list not read: not known to lack one, so the divergence counts
    g2 = cell(True, {"add": FLIPPED}, backend="torch_native")
    assert D.apply(g2, cell(False, {"add": ANSWER}, backend="torch_native")).status == \
        D.DIVERGED


def test_deterministic_inference_on_makes_it_decisive() -> None:
    flag = ("--enable-deterministic-inference",)
    g = cell(True, {"add": FLIPPED}, backend="triton", launch=flag)
    e = cell(False, {"add": ANSWER}, backend="triton", launch=flag)
    d = D.compare(D.side_of(g), D.side_of(e))
    assert d.status == D.DIVERGED and d.note == ""
    assert d.determinism.startswith("--enable-deterministic-inference is on")


def test_a_graph_cell_that_ran_without_graphs_is_not_compared() -> None:
    g = cell(True, {"add": FLIPPED}, ran_graph=False)
    e = cell(False, {"add": ANSWER}, ran_graph=False)
    d = D.apply(g, e)
    assert d.status == D.INCOMPARABLE and g.outcome is Outcome.OK
    assert "did not run CUDA graphs" in d.summary
    assert D.compare(D.side_of(cell(True, {})), D.side_of(cell(False, {}))).status == \
        D.INCOMPARABLE


def test_host_text_is_escaped_and_bounded() -> None:
    evil = "\x1b[31mred\x1b[0m\r\n" + "é" * 5000
    g, e = cell(True, {"t": evil}), cell(False, {"t": "plain"})
    d = D.compare(D.side_of(g), D.side_of(e))
    x = d.diverged[0]
    assert "\x1b" not in x.graph and "\\x1b[31m" in x.graph and "\\r\\n" in x.graph
    assert len(x.graph) < D.TEXT_CAP + 40 and x.graph.endswith("chars)")
    assert all(ord(ch) < 128 for ch in x.graph + x.graph_at + d.summary)
    json.dumps(d.to_dict())  # serialisable as is


def test_pairs_match_graph_and_eager_of_one_config() -> None:
    a, b = cell(True, {"t": "x"}), cell(False, {"t": "x"})
    other = CellResult("h", Config(8, graph=False), Outcome.OK, answers={"t": "x"})
    patched = cell(True, {"t": "x"})
    patched.patches = ["ddprobe-oversize-1"]
    assert D.pairs([a, b, other, patched]) == [(a, b)]


# -- the CPU testbed, for real ------------------------------------------------------------------

@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from testbed_util import install_prefix
    return install_prefix(tmp_path_factory.mktemp("diff-tb") / "site")


def _stale_host(prefix: Path, tmp: Path):  # type: ignore[no-untyped-def]
    from server_util import tb_env, tb_server
    from testbed_util import free_port

    from ddprobe.inventory import Host
    env = dict(tb_env(prefix))
    env["DDTESTBED_DEVICE"] = "cpu"
    return Host(name="stale", host="localhost", python=__import__("sys").executable,
                package="ddtestbed", env=tuple(env.items()), transport="local",
                server=tb_server(free_port(), tmp / "work", scenario="stale"))


TASKS = ("fizzbuzz", "caesar_cipher", "is_palindrome", "binary_search")


@pytest.mark.parametrize("budget", [8, 16])
def test_stale_scenario_on_the_cpu_testbed(ssh_opts, prefix: Path, tmp_path: Path,
                                           budget: int) -> None:
    from ddprobe.cell.differential import run_differential
    from ddprobe.cell.experiment import CellRequest, ProbeOptions
    from ddprobe.remote import connect
    host = _stale_host(prefix, tmp_path)
    req = CellRequest(Config(budget), probe=ProbeOptions(tasks=TASKS), stop_after=True,
                      differential=True)
    with connect(host, ssh_opts) as r:
        pair = run_differential(r, host, req)
    g, e, d = pair.graph, pair.eager, pair.diff
    assert e.config.graph is False and g.config.graph is True
    assert e.outcome is Outcome.OK and e.probes is not None and e.probes.passed == len(TASKS)
    assert g.probes is not None and g.probes.passed == len(TASKS)  # coding passes in both
    assert g.effective is not None and g.effective.cuda_graph is True
    if budget == 8:
        assert d.status == D.SAME and g.outcome is Outcome.OK
        return
    assert d.status == D.DIVERGED and g.outcome is Outcome.GARBAGE, d.summary
    assert g.signature is not None and g.signature.key == "graph-eager divergence"
    assert g.probes.accept_length is not None and e.probes.accept_length is not None
    assert abs(g.probes.accept_length - e.probes.accept_length) / e.probes.accept_length < 0.1
    for x in d.diverged:  # the flips are one space for two, and nothing else
        assert D.escape(pair.graph.answers[x.task]).replace("  ", " ") == \
            D.escape(pair.eager.answers[x.task]).replace("  ", " ") or x.char is None


def test_run_differential_refuses_a_baseline(tmp_path: Path) -> None:
    from ddprobe.cli import main
    base = tmp_path / "b.json"
    base.write_text("{}")
    assert main(["run", "--host", "testbed", "--differential", "--baseline", str(base)]) == 2


def test_the_testbed_takes_sglangs_deterministic_inference_flag() -> None:
    """The differential's advice (`--extra '--enable-deterministic-inference'`) must not be
    refused by the stand-in: SGLang's ServerArgs has the flag, so the testbed has it too."""
    from ddtestbed.srt.server_args import prepare_server_args
    args = prepare_server_args(["--model-path", "sim", "--enable-deterministic-inference"])
    assert args.enable_deterministic_inference is True
    assert prepare_server_args(["--model-path", "sim"]).enable_deterministic_inference is False
