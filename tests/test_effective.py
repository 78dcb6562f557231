"""The effective configuration is what the server says it runs: `/server_info` (or
`/get_server_info`) plus the capture log line, recorded in every cell; old journals still load.

Expected answers, written before running:
- seed b8 graph on the testbed: EAGLE-family fields as resolved by the testbed (DDTREE, draft 9,
  tree budget 8), graphs on, max bs 64 and the captured list [1, 2, 4, 8, 12, 16, ..., 64]
  from the log; attention backend triton; source server_info.
- seed b16 eager: cuda_graph False, no captured list.
- seed b64 (cuBLAS failure during capture, server never healthy): the preflight's answer
  (draft 65) refined by the `Capture cuda graph bs` line.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from server_util import TASKS, reap, tb_env, tb_server
from testbed_util import free_port

from ddprobe import remote
from ddprobe.cell.experiment import ProbeOptions, run_cell
from ddprobe.effective import EffectiveConfig, captured_bs, describe, from_log, from_server_args
from ddprobe.inventory import Host
from ddprobe.results import CellResult, Config, Outcome

# what /get_server_info answers on 0.4.10.post2 (dataclasses.asdict(server_args) + scheduler
# info + version), trimmed to the keys that matter
SGLANG_0410 = {
    "model_path": "/models/llama", "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 3, "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4, "disable_cuda_graph": False,
    "cuda_graph_max_bs": 16, "cuda_graph_bs": None, "attention_backend": "flashinfer",
    "max_running_requests": 48, "context_length": None, "max_total_num_tokens": 500000,
    "version": "0.4.10.post2", "internal_states": [{"avg_spec_accept_length": 2.1}],
}
# 0.5.23 spells the decode-graph settings separately and turns graphs off per phase
SGLANG_0523 = {
    "speculative_algorithm": "EAGLE", "speculative_num_steps": 5,
    "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8,
    "cuda_graph_max_bs": None, "cuda_graph_max_bs_decode": 24,
    "cuda_graph_bs_decode": [1, 2, 4, 8, 16, 24], "disable_cuda_graph": False,
    "disable_decode_cuda_graph": False, "cuda_graph_backend_decode": "full",
    "attention_backend": "triton", "decode_attention_backend": "fa3",
    "context_length": 131072, "version": "0.5.23",
}
CAPTURE_LINE = ("[2026-02-01 10:00:00 TP0] Capture cuda graph bs [1, 2, 4, 8, 12, 16]\n"
                "[2026-02-01 10:00:09 TP0] Capture cuda graph end. Time elapsed: 9.1 s.\n")


def test_server_info_of_0410_reads_every_field() -> None:
    eff = from_server_args(SGLANG_0410)
    assert (eff.algorithm, eff.draft_tokens, eff.num_steps, eff.topk) == ("EAGLE", 4, 3, 1)
    assert eff.cuda_graph is True and eff.cuda_graph_max_bs == 16 and eff.cuda_graph_bs is None
    assert eff.attention_backend == "flashinfer" and eff.max_running_requests == 48
    assert eff.context_length is None and eff.version == "0.4.10.post2"
    assert eff.source == "server_info" and eff.max_captured_bs == 16


def test_0523_decode_spellings_win() -> None:
    eff = from_server_args(SGLANG_0523)
    assert eff.cuda_graph_max_bs == 24 and eff.cuda_graph_bs == (1, 2, 4, 8, 16, 24)
    assert eff.attention_backend == "fa3"  # the decode backend is what verify runs on
    off = from_server_args({**SGLANG_0523, "cuda_graph_backend_decode": "disabled"})
    assert off.cuda_graph is False and off.cuda_graph_bs is None and off.max_captured_bs is None
    off2 = from_server_args({**SGLANG_0410, "disable_cuda_graph": True})
    assert off2.cuda_graph is False


def test_capture_line_corrects_the_configured_max_bs() -> None:
    """The inventory said 64, the server said 64 but captured up to 16: 16 is what runs."""
    eff = from_server_args({**SGLANG_0410, "cuda_graph_max_bs": 64}).with_log(CAPTURE_LINE)
    assert eff.cuda_graph_bs == (1, 2, 4, 8, 12, 16) and eff.cuda_graph_max_bs == 16
    assert eff.max_captured_bs == 16
    assert set(eff.fields_from_log) == {"cuda_graph_bs", "cuda_graph_max_bs"}
    assert eff.source == "server_info"


def test_log_alone() -> None:
    eff = from_log("loading weights\n" + CAPTURE_LINE + "RuntimeError: CUBLAS_STATUS\n")
    assert eff is not None and eff.source == "log" and eff.cuda_graph is True
    assert eff.cuda_graph_bs == (1, 2, 4, 8, 12, 16) and eff.draft_tokens is None
    assert from_log("no capture here") is None


@pytest.mark.parametrize("line", [
    "Capture cuda graph bs []", "Capture cuda graph bs [1, x]", "Capture cuda graph bs [0, 1]",
    "Capture cuda graph bs [" + ", ".join(["1"] * 600) + "]",
    "Capture cuda graph bs [99999999999]",
])
def test_hostile_capture_lines_are_not_believed(line: str) -> None:
    assert captured_bs(line) is None


def test_hostile_server_info_values_are_dropped() -> None:
    eff = from_server_args({"speculative_num_draft_tokens": "9", "speculative_eagle_topk": True,
                            "cuda_graph_max_bs": float("nan"), "attention_backend": "\x1b[31m",
                            "cuda_graph_bs": [1, -2], "speculative_algorithm": "x" * 500,
                            "context_length": 1 << 50})
    assert eff == EffectiveConfig(source="server_info")


def test_round_trip_and_old_journals() -> None:
    eff = from_server_args(SGLANG_0523, source="preflight").with_log(CAPTURE_LINE)
    d = json.loads(json.dumps(eff.to_dict()))
    assert EffectiveConfig.from_dict(d) == eff
    cell = CellResult(host="h", config=Config(budget=8), outcome=Outcome.OK, effective=eff)
    back = CellResult.from_dict(json.loads(json.dumps(cell.to_dict())))
    assert back.effective == eff and back == cell
    old = cell.to_dict()
    del old["effective"]  # a journal line written before the field existed
    assert CellResult.from_dict(old).effective is None
    with pytest.raises(ValueError):
        from_server_args({}, source="inventory")
    assert "draft 8" in describe(eff) and "[preflight]" in describe(eff)



@pytest.mark.ssh
def test_cells_record_what_the_testbed_server_runs(ssh_opts, make_host: Callable[..., Host],
                                                   tb_prefix: Path,
                                                   tmp_path: Path) -> None:
    host = make_host("gpu-a", python=sys.executable, package="ddtestbed", env=tb_env(tb_prefix),
                     server=tb_server(free_port(), tmp_path / "work"))
    probe = ProbeOptions(tasks=TASKS[:1], max_tokens=64, concurrency=1)
    try:
        with remote.connect(host, ssh_opts) as r:
            ok = run_cell(r, host, Config(budget=8), probe=probe)
            eager = run_cell(r, host, Config(budget=16, graph=False), probe=probe)
            dead = run_cell(r, host, Config(budget=64), probe=probe)
    finally:
        reap(tmp_path / "work")
    assert ok.outcome is Outcome.OK, ok
    e = ok.effective
    assert e is not None and e.source == "server_info"
    assert (e.algorithm, e.draft_tokens, e.tree_budget) == ("DDTREE", 9, 8)
    assert e.cuda_graph is True and e.cuda_graph_max_bs == 64
    assert e.cuda_graph_bs == (1, 2, 4, 8, 12, *range(16, 65, 8))
    assert e.attention_backend == "triton" and e.context_length == 32768
    assert ok.server_info_path == "/server_info"
    assert eager.outcome is Outcome.OK and eager.effective is not None
    assert eager.effective.cuda_graph is False and eager.effective.cuda_graph_bs is None
    assert eager.effective.draft_tokens == 17
    assert dead.outcome is Outcome.CRASH and dead.effective is not None
    # never answered /server_info: the preflight's answer, refined by the capture line
    assert dead.effective.source == "preflight" and dead.effective.cuda_graph_max_bs == 64
    assert "cuda_graph_bs" in dead.effective.fields_from_log
    assert dead.effective.draft_tokens == 65


def test_the_preflights_bs_list_is_cut_at_the_request_pool() -> None:
    # the H200 run (docs/gpu-results.md, 2026-12-02): ServerArgs planned 1..256 (51 sizes) with
    # --max-running-requests 8; the server's log said `Capture cuda graph bs [1, ..., 8]`
    from ddprobe.effective import capped_by_request_pool
    planned = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 24, 32, 256)
    eff = EffectiveConfig(cuda_graph=True, cuda_graph_max_bs=256, cuda_graph_bs=planned,
                          max_running_requests=8, source="preflight")
    got = capped_by_request_pool(eff)
    assert got.cuda_graph_bs == (1, 2, 3, 4, 5, 6, 7, 8) and got.max_captured_bs == 8
    # a pool between two planned sizes is captured itself (SGLang appends it)
    assert capped_by_request_pool(replace(eff, max_running_requests=11)).cuda_graph_bs == (
        1, 2, 3, 4, 5, 6, 7, 8, 10, 11)
    # nothing to cut, or nothing known: unchanged
    for pool in (512, 256, None):
        same = replace(eff, max_running_requests=pool)
        assert capped_by_request_pool(same) == same
    off = replace(eff, cuda_graph=False, cuda_graph_bs=None)
    assert capped_by_request_pool(off) == off
