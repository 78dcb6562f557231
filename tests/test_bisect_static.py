"""Static evidence for the bisect: suspects from grep-buffers on real SGLang wheels and on the
testbed's own source (read as text, never imported)."""
from __future__ import annotations

from pathlib import Path

import pytest
from sources_util import wheel_texts

from ddprobe.bisect.static import Suspect, find_suspects, size_line
from ddprobe.sources.buffers import SizingParams, analyse_buffers, wanted_files
from ddprobe.sources.oversize import make_oversize_patch

PARAMS = SizingParams(max_bs=64, budgets=(8, 16, 32, 64), context_len=32768)
TESTBED = Path(__file__).resolve().parents[1] / "ddtestbed"


def _testbed_texts() -> dict[str, str]:
    out = {}
    for pat in wanted_files("all"):
        for p in (TESTBED).glob(pat):
            out[str(p.relative_to(TESTBED))] = p.read_text(encoding="utf-8")
    return out


@pytest.mark.parametrize("version,line", [("0.4.10.post2", 367), ("0.5.2", 398),
                                          ("0.5.10", 479)])
def test_real_sglang_triton_backend_has_the_custom_mask_as_the_one_suspect(version: str,
                                                                          line: int) -> None:
    rep = analyse_buffers(wheel_texts(version, "triton"), package="sglang", version=version,
                          backend="triton", params=PARAMS)
    sus = find_suspects(rep)
    assert [(s.attr, s.line, s.tier) for s in sus] == [("cuda_graph_custom_mask", line, 1)]
    assert sus[0].where == f"srt/layers/attention/triton_backend.py:{line}"
    # the oversize experiment can enlarge it: the patch builds from the same analysis
    patch = make_oversize_patch(rep, [sus[0].attr], 4)
    assert patch.paths == ("srt/layers/attention/triton_backend.py",)
    assert "* 4" in patch.text


def test_testbed_source_flags_the_mask_that_ignores_the_budget() -> None:
    rep = analyse_buffers(_testbed_texts(), package="ddtestbed", params=PARAMS)
    sus = find_suspects(rep)
    assert sus[0].attr == "cuda_graph_custom_mask" and sus[0].tier == 1
    assert "fixed-size-growing-use" in sus[0].flags
    assert any("init_forward_metadata_replay_cuda_graph" in u for u in sus[0].growing_uses)
    assert "draft_tokens" not in sus[0].depends_on


def test_nothing_flagged_falls_back_to_fixed_size_captured_buffers() -> None:
    rep = analyse_buffers(wheel_texts("0.5.23", "triton"), package="sglang", version="0.5.23",
                          backend="triton", params=PARAMS)
    sus = find_suspects(rep)
    assert sus and all(s.tier == 2 for s in sus)
    assert all("draft_tokens" not in s.depends_on for s in sus)
    assert len({s.attr for s in sus}) == len(sus)


def test_suspect_round_trips_and_prints_sizes() -> None:
    s = Suspect("m", "f.py", 3, "(n,)", "C.f", ("fixed-size-growing-use",), 1,
                sizes=({"budget": 8, "bytes": 2 << 20, "short_by": None},
                       {"budget": 16, "bytes": 2 << 20, "short_by": 4096}))
    assert Suspect.from_dict(s.to_dict()) == s
    assert size_line(s) == "b8: 2.0 MiB, b16: 2.0 MiB (short by 4,096 elements)"
    assert size_line(s, [16]).startswith("b16")


# ---- which backend the evidence is read from, and the crash's traceback (issue 25) ----------
# Expected, written before the run: on the testbed, --attention-backend flashinfer builds
# TorchNativeAttnBackend (model_runner.py's else branch), a TritonAttnBackend subclass, so the
# custom mask of triton_backend.py is a suspect; the real testbed crash log in
# tests/data/journal-old-bisect (b16, graphs on) has write_tree_mask two frames above the
# innermost (device.py's write and _segment below it), called with self.cuda_graph_custom_mask
# at triton_backend.py:145: that ranks the mask first, whatever the order before.

def _testbed_all_texts() -> dict[str, str]:
    return {str(p.relative_to(TESTBED)): p.read_text(encoding="utf-8")
            for p in (TESTBED / "srt").rglob("*.py")}


def test_evidence_backend_is_the_one_the_cells_run() -> None:
    from ddprobe.bisect.static import evidence_backend
    assert evidence_backend("fa3", "triton", (), "flashinfer")[0] == "fa3"
    b, why = evidence_backend(None, "triton", ("--attention-backend", "fa3"), "flashinfer")
    assert b == "triton" and "the preflight" in why
    b, why = evidence_backend(None, None, ("--attention-backend=fa3",), "flashinfer")
    assert b == "fa3" and "server.args" in why and "assumed" in why
    b, why = evidence_backend(None, None, (), "flashinfer")
    assert b == "flashinfer" and "server.backend" in why
    b, why = evidence_backend(None, None, (), None)
    assert b == "all" and "give --backend or server.backend" in why


def test_the_crash_traceback_ranks_the_writer_first() -> None:
    from ddprobe.bisect.static import rank_by_traceback, traceback_frames
    rep = analyse_buffers(_testbed_all_texts(), package="ddtestbed", backend="flashinfer",
                          params=PARAMS)
    sus = find_suspects(rep)
    mask = [s for s in sus if s.attr == "cuda_graph_custom_mask"]
    assert mask and mask[0].file == "srt/layers/attention/triton_backend.py"
    log = (Path(__file__).parent / "data/journal-old-bisect/logs/testbed-b16-graph.log"
           ).read_text().splitlines()
    frames = traceback_frames(log)
    assert [f for _, _, f in frames[:3]] == ["_segment", "write", "write_tree_mask"]
    others = [s for s in sus if s.attr != "cuda_graph_custom_mask"] or [
        Suspect("seq_lens", "srt/model_executor/cuda_graph_runner.py", 1, "(max_bs,)", "x",
                (), 2)]
    ranked = rank_by_traceback([*others, mask[0]], log)
    assert ranked[0].attr == "cuda_graph_custom_mask"
    assert ranked[0].ranked_by.startswith(
        "the crash's traceback: frame 2 from the innermost (tree_attention.py:47 "
        "write_tree_mask) is called with it at srt/layers/attention/triton_backend.py:145")
    assert [s.attr for s in ranked[1:]] == [s.attr for s in others]
    assert rank_by_traceback(others, ["no traceback here"]) == others


def test_a_chained_traceback_ranks_by_the_first_exceptions_frames() -> None:
    """Real 0.5.11 on the H200 (docs/gpu-results.md, the planted positions buffer at b31):
    the capture fails in the rotary embedding, and the runner re-raises it as `Capture cuda
    graph failed` ("During handling of the above exception ..."). Read from the last
    traceback alone, the innermost frame was the re-raise in `__init__` and no suspect was
    ranked, so the oversize naming tried the mask first; the first exception's frames run
    through `capture_one_batch_size`, which reads `buffers.positions[:num_tokens]`."""
    from ddprobe.bisect.static import rank_by_traceback, traceback_frames
    log = (Path(__file__).parent / "data/sglang-0.5.11-h200-plant-positions-b31-capture.log"
           ).read_text().splitlines()
    frames = traceback_frames(log)
    assert frames[0][2] == "forward_cuda" and frames[0][0].endswith("rotary_embedding/base.py")
    funcs = [f for _, _, f in frames]
    assert funcs.index("capture_one_batch_size") < funcs.index("run_scheduler_process")
    mask = Suspect("cuda_graph_custom_mask", "srt/layers/attention/triton_backend.py", 519,
                   "max_num_tokens * self.max_context_len",
                   "TritonAttnBackend.init_cuda_graph_state",
                   ("short-at-full-context",), 1,
                   uses=("srt/layers/attention/triton_backend.py:806 "
                         "init_forward_metadata_replay_cuda_graph: custom_mask = "
                         "self.cuda_graph_custom_mask",))
    pos = Suspect("positions", "srt/model_executor/cuda_graph_runner.py", 191, "(max_bs * 16,)",
                  "DecodeInputBuffers.create", ("fixed-size-growing-use",), 1,
                  uses=("srt/model_executor/cuda_graph_runner.py:972 capture_one_batch_size: "
                        "positions = buffers.positions[:num_tokens]",))
    ranked = rank_by_traceback([mask, pos], log)
    assert [s.attr for s in ranked] == ["positions", "cuda_graph_custom_mask"]
    assert "cuda_graph_runner.py:1171 capture_one_batch_size" in ranked[0].ranked_by
    # an unchained second traceback still replaces the first
    assert traceback_frames([*log, "Traceback (most recent call last):",
                             '  File "/x/y.py", line 3, in other']) == [("/x/y.py", 3, "other")]


def test_a_crash_cells_excerpt_keeps_the_frames_the_ranking_needs() -> None:
    """The cell's log excerpt (its last 25 lines) of the real b31 capture failure starts after
    both tracebacks; the excerpt now leads with the first exception's frames, so the
    planner, which sees only the excerpt, ranks positions first."""
    from ddprobe.bisect.static import rank_by_traceback
    from ddprobe.cell.classify import classify_dead, excerpt
    text = (Path(__file__).parent / "data/sglang-0.5.11-h200-plant-positions-b31-capture.log"
            ).read_text()
    v = classify_dead(text, package="sglang", during="start-up")
    ex = excerpt(text, v.signature)
    assert ex[0].endswith("Traceback (most recent call last):") and "..." in ex
    cut = ex.index("...")
    assert ex[cut - 1].startswith("RuntimeError: view size is not compatible")
    assert ex[cut - 2].lstrip().startswith('File "/tmp/site/sglang/srt/layers/rotary_embedding')
    assert len(ex) <= 25 + 15 + 2  # the tail, the chain head, the signature line and its cut
    pos = Suspect("positions", "srt/model_executor/cuda_graph_runner.py", 191, "(max_bs * 16,)",
                  "DecodeInputBuffers.create", ("fixed-size-growing-use",), 1,
                  uses=("srt/model_executor/cuda_graph_runner.py:972 capture_one_batch_size: "
                        "positions = buffers.positions[:num_tokens]",))
    other = Suspect("cuda_graph_custom_mask", "srt/layers/attention/triton_backend.py", 519,
                    "x", "TritonAttnBackend.init_cuda_graph_state", (), 1)
    assert [s.attr for s in rank_by_traceback([other, pos], ex)] == [
        "positions", "cuda_graph_custom_mask"]
    # without a chain the excerpt is the tail, as before
    plain = 'Traceback (most recent call last):\n  File "/a.py", line 1, in f\nValueError: x\n'
    assert excerpt(plain, None) == plain.splitlines()
