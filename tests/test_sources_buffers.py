"""grep-buffers' AST analysis on the real source text of four SGLang releases (and the testbed)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import SGLANG_VERSIONS
from sources_util import wheel_texts

from ddprobe.errors import PatchError, UsageError
from ddprobe.hostside.patchtext import apply_patch
from ddprobe.sources.buffers import (
    FLAG_FIXED,
    FLAG_NONE,
    FLAG_SHORT,
    SizingParams,
    analyse_buffers,
)
from ddprobe.sources.oversize import make_oversize_patch
from ddprobe.sources.patches import load_patch

TRITON = "srt/layers/attention/triton_backend.py"
PARAMS = SizingParams(max_bs=64, budgets=(8, 16, 32), context_len=4096)
def line_of(text: str, needle: str) -> int:
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in text")


@pytest.mark.parametrize("version", ["0.4.10.post2", "0.5.2", "0.5.10"])
def test_custom_mask_found_with_real_shape_and_sizes(version: str) -> None:
    texts = wheel_texts(version, "triton")
    rep = analyse_buffers(texts, package="sglang", version=version, backend="triton",
                          params=PARAMS)
    rows = rep.find("cuda_graph_custom_mask")
    assert len(rows) == 1
    r = rows[0]
    text = texts[TRITON]
    assert r.file == TRITON
    assert r.line == line_of(text, "self.cuda_graph_custom_mask = torch.zeros(")
    assert r.scope == "TritonAttnBackend.init_cuda_graph_state" and r.phase == "init"
    assert r.allocator == "torch.zeros" and r.dtype == "torch.uint8"
    assert r.shape == "max_num_tokens * self.max_context_len"
    assert r.resolved == "max_bs * draft_tokens * context_len"
    assert r.depends_on == ("max_bs", "draft_tokens", "context_len")
    assert r.conditions == ("not self.skip_prefill",)
    assert any("self.max_context_len = model_runner.model_config.context_len" in n
               for n in r.notes)
    # the verify pass lays the mask out as ndt * (seq_len + ndt) per request, and the longest
    # seq_len is the release's own: max_req_len = context_len - 1 (tp_worker.py), max_new_tokens
    # <= max_req_len - input_len - 1 (scheduler.py), so 4094 at context 4096
    assert "seq_mask_len" in (r.demand or "")
    lim = rep.seq_limit
    assert lim is not None and lim.below == 2 and not lim.assumed
    tp_line = line_of(texts["srt/managers/tp_worker.py"], "self.max_req_len = min(")
    assert f"srt/managers/tp_worker.py:{tp_line}" in lim.text
    assert "srt/managers/scheduler.py:" in lim.text
    for s, b in zip(r.sizes, PARAMS.budgets, strict=False):
        ndt = b + 1
        assert (s.elements, s.bytes) == (64 * ndt * 4096, 64 * ndt * 4096)
        assert s.seq_len == 4094
        assert s.demand_elements == 64 * ndt * (4094 + ndt)
        assert s.short_by == 64 * ndt * (ndt - 2)
    assert FLAG_SHORT in r.flags


def test_custom_mask_none_site_and_real_allocation_both_shown_0510() -> None:
    texts = wheel_texts("0.5.10", "triton")
    r = analyse_buffers(texts, backend="triton").find("cuda_graph_custom_mask")[0]
    none_line = line_of(texts[TRITON], "self.cuda_graph_custom_mask = None")
    assert FLAG_NONE in r.flags
    assert r.none_sites == (f"{TRITON}:{none_line} TritonAttnBackend.__init__",)
    assert r.line > none_line and r.scope.endswith("init_cuda_graph_state")


def test_0523_moved_files_and_buffers_degrade_to_not_found_rows() -> None:
    texts = wheel_texts("0.5.23", "triton")
    rep = analyse_buffers(texts, package="sglang", version="0.5.23", backend="triton",
                          params=PARAMS)
    missing = {(r.status, r.attr or r.file): r.message for r in rep.rows if r.status != "found"}
    assert ("missing-file", "srt/model_executor/cuda_graph_runner.py") in missing
    msg = missing[("missing-buffer", "cuda_graph_custom_mask")]
    assert "not found in this version" in msg and "_verify_mask.buffer" in msg
    # the mask moved to a helper; its size is inlined from tree_mask_numel's branches
    vm = [r for r in rep.find("_verify_mask.buffer") if TRITON in (r.via or "")]
    assert len(vm) == 1
    v = vm[0]
    assert v.file == "srt/layers/attention/verify_mask.py"
    assert v.via.startswith("maybe_create_verify_mask() at " + TRITON)
    assert v.dtype == "torch.uint8"  # the caller's dtype= keyword
    assert FLAG_NONE in v.flags and FLAG_SHORT not in v.flags
    assert [s.elements for s in v.sizes] == [64 * (b + 1) * (4096 + b + 1) for b in (8, 16, 32)]
    # cleared by a comparison with its use: triton_backend's seq_mask_len (through the local
    # `custom_mask = self._verify_mask.buffer if ... else None`), at the longest seq_len
    use_line = line_of(texts[TRITON], "seq_mask_len = num_tokens_per_req * (seq_lens + ")
    assert v.demand and f"{TRITON}:{use_line}" in v.demand and "seq_mask_len" in v.demand
    assert [(s.demand_elements, s.short_by, s.short_at_context) for s in v.sizes] == [
        (64 * (b + 1) * (4094 + b + 1), None, None) for b in (8, 16, 32)]


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_every_release_all_backends_no_crash_and_runner_buffers(version: str) -> None:
    texts = wheel_texts(version)
    full = SizingParams(max_bs=64, budgets=(8, 16, 32), context_len=4096, topk=4, num_steps=3,
                        extra=(("req_pool_size", 256),))
    rep = analyse_buffers(texts, package="sglang", version=version, params=full)
    found = [r for r in rep.rows if r.status == "found"]
    assert len(found) > 30
    assert all(r.line and r.allocator and r.shape for r in found)
    files = {r.file for r in found}
    assert TRITON in files and "srt/layers/attention/flashinfer_backend.py" in files
    # the decode graph's input buffers (moved to runner_utils in 0.5.2x) are listed
    ids = [r for r in found if r.attr == "input_ids"
           and r.resolved == "(max_bs * draft_tokens,)"]
    assert ids, [r.attr for r in found][:40]
    # with these parameters every size that needs only sizing variables is evaluated
    for r in found:
        if r.resolved and set(r.free) == set() and r.sizes and r.dtype and "." in r.dtype:
            assert all(s.elements is not None for s in r.sizes), r


def test_shipped_patch_makes_the_mask_fit_the_layout() -> None:
    texts = wheel_texts("0.5.10", "triton")
    patched = apply_patch(load_patch("sglang-0.5.10-triton-custom-mask"), texts)
    rep = analyse_buffers({**texts, **patched}, backend="triton", params=PARAMS)
    r = rep.find("cuda_graph_custom_mask")[0]
    assert r.shape == "(mask_numel,)" and FLAG_SHORT not in r.flags
    # sized for seq_len = context_len: it holds the layout at 4094 with 2 * draft per request
    # to spare, and would hold it at 4096 too
    assert [s.elements - s.demand_elements for s in r.sizes] == [
        64 * (b + 1) * 2 for b in PARAMS.budgets]
    assert all(s.short_by is None and s.short_at_context is None for s in r.sizes)


# A mask sized draft * (context_len + 1) per request: at seq_len = context_len it is short by
# draft * (draft - 1) per request at every budget, but no request reaches context_len. At the
# longest reachable seq_len (context_len - 2 with the limits below) the layout needs
# draft * (context_len - 2 + draft): it fits for draft <= 3 and is short by draft * (draft - 3)
# per request beyond. Written before the run: budget 2 (draft 3) fits exactly, short only at
# context_len by 64 * 3 * 2; budget 3 (draft 4) short by 64 * 4 * 1; budget 8 by 64 * 9 * 6.
_TP = """class TpModelWorker:
    def __init__(self):
        self.max_req_len = min(
            self.model_config.context_len - 1,
            self.max_total_num_tokens - 1,
        )
"""
_SCHED = """class Scheduler:
    def init_req_max_new_tokens(self, req):
        req.sampling_params.max_new_tokens = min(
            req.sampling_params.max_new_tokens or 1 << 30,
            self.max_req_len - len(req.origin_input_ids) - 1,
        )
"""
_PLUS_ONE = """
class TritonAttnBackend:
    def __init__(self, model_runner):
        self.num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens
        self.max_context_len = model_runner.model_config.context_len

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.cuda_graph_custom_mask = torch.zeros(
            (max_num_tokens * (self.max_context_len + 1),), dtype=torch.uint8)

    def init_forward_metadata_capture_cuda_graph(self, bs, seq_lens, spec_info):
        self.cuda_graph_custom_mask[: spec_info.custom_mask.shape[0]] = spec_info.custom_mask
        seq_mask_len = self.num_draft_tokens * (seq_lens + self.num_draft_tokens)
"""


def test_a_shortfall_only_at_an_unreachable_length_is_not_a_suspect() -> None:
    params = SizingParams(max_bs=64, budgets=(2, 3, 8), context_len=4096)
    texts = {TRITON: _PLUS_ONE, "srt/managers/tp_worker.py": _TP,
             "srt/managers/scheduler.py": _SCHED}
    r = analyse_buffers(texts, backend="triton", params=params).find(
        "cuda_graph_custom_mask")[0]
    got = [(s.budget, s.seq_len, s.short_by, s.short_at_context) for s in r.sizes]
    assert got == [(2, 4094, None, 64 * 3 * 2), (3, 4094, 64 * 4 * 1, None),
                   (8, 4094, 64 * 9 * 6, None)]
    assert FLAG_SHORT in r.flags  # budgets 3 and 8
    only2 = analyse_buffers(texts, backend="triton", params=SizingParams(
        max_bs=64, budgets=(2,), context_len=4096)).find("cuda_graph_custom_mask")[0]
    assert FLAG_SHORT not in only2.flags
    # without the release's limits (a fork, the testbed): seq_len = context_len, and said so
    rep = analyse_buffers({TRITON: _PLUS_ONE}, backend="triton", params=params)
    assert rep.seq_limit is not None and rep.seq_limit.assumed
    assert "seq_len = context_len assumed" in rep.seq_limit.text
    bare = rep.find("cuda_graph_custom_mask")[0]
    assert [s.short_by for s in bare.sizes] == [64 * 3 * 2, 64 * 4 * 3, 64 * 9 * 8]


def test_fixed_size_buffer_with_budget_dependent_use_is_flagged(tmp_path: Path) -> None:
    # an allocator shim imported as torch, sized from max_bs only, written per draft token
    src = '''
from .device import shim as torch

class Backend:
    def __init__(self, model_runner):
        self.num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens
        self.max_context_len = model_runner.model_config.context_len
        self.cuda_graph_custom_mask = None

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.cuda_graph_custom_mask = torch.zeros((max_bs * self.max_context_len,),
                                                  dtype=torch.uint8)

    def init_forward_metadata_replay_cuda_graph(self, bs, spec_info):
        n = bs * self.num_draft_tokens * self.max_context_len
        self.cuda_graph_custom_mask[:n] = spec_info.custom_mask
'''
    rep = analyse_buffers({TRITON: src}, backend="triton", params=PARAMS)
    r = rep.find("cuda_graph_custom_mask")[0]
    assert r.depends_on == ("max_bs", "context_len")
    assert FLAG_FIXED in r.flags and FLAG_NONE in r.flags
    use_line = line_of(src, "self.cuda_graph_custom_mask[:n]")
    assert len(r.growing_uses) == 1 and f"{TRITON}:{use_line} " in r.growing_uses[0]
    assert [s.bytes for s in r.sizes] == [64 * 4096] * 3


def test_bad_and_missing_input_gives_rows_not_crashes() -> None:
    rep = analyse_buffers({TRITON: "def broken(:\n"}, backend="triton")
    kinds = {r.status for r in rep.rows}
    assert "parse-error" in kinds and "missing-file" in kinds
    bad = [r for r in rep.rows if r.status == "parse-error"][0]
    assert bad.file == TRITON and "cannot parse" in (bad.message or "")
    with pytest.raises(UsageError, match="unknown backend 'cuda'"):
        analyse_buffers({}, backend="cuda")


def test_unknown_model_sizes_are_named_and_vars_fill_them() -> None:
    texts = wheel_texts("0.5.10", "triton")
    r = analyse_buffers(texts, backend="triton", params=PARAMS).find(
        "cuda_graph_attn_logits")[0]
    assert r.sizes[0].elements is None
    assert set(r.sizes[0].missing) == {"num_head", "max_kv_splits", "v_head_dim"}
    filled = SizingParams(max_bs=64, budgets=(16,), context_len=4096,
                          extra=(("num_head", 32), ("max_kv_splits", 8), ("v_head_dim", 128)))
    r2 = analyse_buffers(texts, backend="triton", params=filled).find(
        "cuda_graph_attn_logits")[0]
    assert r2.sizes[0].elements == 64 * 17 * 32 * 8 * 128
    assert r2.sizes[0].bytes == 4 * r2.sizes[0].elements  # torch.float32


def test_oversize_patch_multiplies_named_buffers_and_applies() -> None:
    texts = wheel_texts("0.5.10", "triton")
    rep = analyse_buffers(texts, package="sglang", version="0.5.10", backend="triton",
                          params=PARAMS)
    p = make_oversize_patch(rep, ["cuda_graph_custom_mask", "custom_mask"], factor=4)
    assert set(p.paths) == {TRITON, "srt/model_executor/cuda_graph_runner.py"}
    assert p.versions == ("0.5.10",) and p.package == "sglang" and len(p.original_sha256) == 2
    out = apply_patch(p, texts)
    rep2 = analyse_buffers({**texts, **out}, backend="triton", params=PARAMS)
    big = rep2.find("cuda_graph_custom_mask")[0]
    assert [s.elements for s in big.sizes] == [4 * s.elements for s in
                                               rep.find("cuda_graph_custom_mask")[0].sizes]
    assert re.search(r"\(\(max_num_tokens \* self\.max_context_len\) \* 4\)", out[TRITON])
    with pytest.raises(PatchError, match="no buffer named 'nope'"):
        make_oversize_patch(rep, ["nope"])


def test_testbed_layout_is_analysed_like_sglang() -> None:
    root = Path(__file__).resolve().parents[1] / "ddtestbed"
    src = root / TRITON
    if not src.exists():
        pytest.fail("the testbed's srt/layers/attention/triton_backend.py is missing")
    texts = {TRITON: src.read_text()}
    runner = root / "srt/model_executor/cuda_graph_runner.py"
    if runner.exists():
        texts["srt/model_executor/cuda_graph_runner.py"] = runner.read_text()
    rep = analyse_buffers(texts, package="ddtestbed", backend="triton", params=PARAMS)
    rows = rep.find("cuda_graph_custom_mask")
    assert rows, [r.attr for r in rep.rows]
    r = rows[0]
    assert r.file == TRITON and r.scope.endswith("init_cuda_graph_state")
    line = texts[TRITON].splitlines()[r.line - 1]
    assert "cuda_graph_custom_mask" in line and r.allocator == "torch.zeros"
    assert {"max_bs", "context_len"} <= set(r.depends_on)


RUNNER = "srt/model_executor/cuda_graph_runner.py"
PLANT_POSITIONS = (Path(__file__).resolve().parents[1]
                   / "benchmarks/patches/sglang-0.5.11-plant-positions.patch")


def test_a_buffer_held_in_a_dataclass_is_checked_through_its_field() -> None:
    """0.5.11 keeps the graph runner's static inputs in `DecodeInputBuffers`, allocated as
    locals of `create()` and stored by `cls(positions=positions, ...)`; the runner reads them
    as `buffers.positions[:num_tokens]` after `buffers: DecodeInputBuffers = self.buffers`.
    Those accesses are the buffers' uses: with the real sizes (max_num_token) nothing is
    flagged, and with positions planted at `max_bs * 16` (the GPU run's buffer-sizing
    defect) it is the fixed-size buffer with a growing use, so the bisect's oversize
    experiment can name it."""
    texts = wheel_texts("0.5.11", "triton")
    params = SizingParams(max_bs=8, budgets=(7, 15, 31), context_len=2048)
    clean = analyse_buffers(texts, backend="triton", params=params)
    rows = {r.attr: r for r in clean.rows if r.file == RUNNER
            and r.scope == "DecodeInputBuffers.create"}
    pos = rows["positions"]
    use_line = line_of(texts[RUNNER], "positions = buffers.positions[:num_tokens]")
    assert [u.split(" ")[0] for u in pos.growing_uses] == [f"{RUNNER}:{use_line}"]
    copy_line = line_of(texts[RUNNER], "self.positions[:raw_num_token],")
    assert f"{RUNNER}:{copy_line}" in [u.split(" ")[0] for u in pos.uses]
    assert "draft_tokens" in pos.depends_on and FLAG_FIXED not in pos.flags
    assert not [r.attr for r in rows.values() if FLAG_FIXED in r.flags]
    planted = apply_patch(load_patch(str(PLANT_POSITIONS)), texts)
    rep = analyse_buffers({**texts, **planted}, backend="triton", params=params)
    bad = [r for r in rep.rows if r.file == RUNNER and FLAG_FIXED in r.flags]
    assert [(r.attr, r.shape, r.depends_on) for r in bad] == [
        ("positions", "(max_bs * 16,)", ("max_bs",))]


def test_the_gpu_runs_plants_apply_to_the_real_0511_runner() -> None:
    """The planted defects of the GPU runs (benchmarks/patches) apply to the real file they
    name; the combined one holds both edits and still leaves positions the only new suspect."""
    texts = wheel_texts("0.5.11", "triton")
    pdir = PLANT_POSITIONS.parent
    ids = apply_patch(load_patch(str(pdir / "sglang-0.5.11-plant-graph-input-ids.patch")), texts)
    both = apply_patch(load_patch(str(pdir / "sglang-0.5.11-plant-positions-and-input-ids.patch")),
                       texts)
    assert "num_ids = min(raw_num_token, raw_bs * 8)" in ids[RUNNER]
    assert "num_ids = min(raw_num_token, raw_bs * 8)" in both[RUNNER]
    assert "positions = torch.zeros((max_bs * 16,), dtype=torch.int64)" in both[RUNNER]
    params = SizingParams(max_bs=8, budgets=(7, 15, 31), context_len=2048)
    rep = analyse_buffers({**texts, **both}, backend="triton", params=params)
    assert [r.attr for r in rep.rows if r.file == RUNNER and FLAG_FIXED in r.flags] == [
        "positions"]
