"""The compute-sanitizer parser on real memcheck output captured on an H200."""
from __future__ import annotations

from pathlib import Path

from ddprobe.cell.memcheck import match_buffer, parse_memcheck

DATA = Path(__file__).parent / "data"


def test_overrun_report_names_kernel_access_and_allocation():
    rep = parse_memcheck((DATA / "compute-sanitizer-memcheck-overrun.txt").read_text())
    assert rep.ran and not rep.clean and rep.error_count == 49
    assert len(rep.findings) == 1  # three printed errors, same kernel/allocation: folded
    f = rep.findings[0]
    assert (f.kernel, f.access, f.space, f.size) == ("write_mask", "write", "__global__", 1)
    assert f.location == "gpu_overrun.py:17" and f.count == 3
    assert f.allocation_size == 295_560 and f.direction == "after" and f.distance == 121
    assert f.allocation_base == "0x7fce36800000" and f.address == "0x7fce36848300"
    assert "295,560" in f.summary


def test_caching_allocator_report_is_clean():
    rep = parse_memcheck((DATA / "compute-sanitizer-memcheck-caching-allocator.txt").read_text())
    assert rep.ran and rep.clean and rep.findings == [] and rep.error_count == 0


def test_buffer_named_by_size():
    rep = parse_memcheck((DATA / "compute-sanitizer-memcheck-overrun.txt").read_text())
    rows = [{"attr": "cuda_graph_kv_indices", "bytes": 1_048_576},
            {"attr": "cuda_graph_custom_mask", "bytes": 295_560, "file": "x.py", "line": 3}]
    assert match_buffer(rep.findings[0], rows)["attr"] == "cuda_graph_custom_mask"
    assert match_buffer(rep.findings[0], rows[:1]) is None


def test_not_a_sanitizer_run():
    rep = parse_memcheck("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert not rep.ran and not rep.clean and rep.findings == []
