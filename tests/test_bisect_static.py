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
