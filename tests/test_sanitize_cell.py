"""The sanitize cell: naming the buffer from a memcheck report with grep-buffers (exact size, or
the one unknown size variable solved for), the sanitized launch, and the cell end to end on the
CPU testbed through a local host.

compute-sanitizer needs an NVIDIA GPU, so the end-to-end tests put a stand-in on the host's
PATH: a real program that, like the real tool, takes `--tool memcheck --print-limit 20` and
the server's command, runs the server as its child and prints the real tool's banner and
summary lines. What real memcheck reports (kernel, access, nearest allocation) is parsed from
output captured on an H200 running the testbed's CUDA mode (tests/data/testbed-*.txt).
"""
from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

import pytest
from sanitize_util import STAND_IN, sanitize_host
from sources_util import tb_buffer_report
from testbed_util import install_prefix

from ddprobe.cell.memcheck import parse_memcheck
from ddprobe.cell.sanitize import (
    NO_CACHING,
    SANITIZER_ARGS,
    name_buffer,
    run_sanitize_cell,
    sanitized_launch,
    solve_row,
)
from ddprobe.remote import connect
from ddprobe.results import Config, Outcome
from ddprobe.server.launch import Launch

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
TESTBED = REPO / "ddtestbed"
SEED_B16_MASK = 9 * 64 * (32768 + 9)  # the seed's custom mask at b16: sized for 9 draft tokens
# the line grep-buffers must name: where the testbed allocates the mask (read, not hard-coded)
MASK_LINE = next(i for i, ln in enumerate(
    (TESTBED / "srt/layers/attention/triton_backend.py").read_text().splitlines(), 1)
    if "self.cuda_graph_custom_mask = torch.zeros(" in ln)


def test_the_unknown_draft_token_count_is_solved_from_the_allocation_size() -> None:
    rep, params = tb_buffer_report()
    mask = next(r for r in rep.rows if r.attr == "cuda_graph_custom_mask")
    assert mask.sizes[0].bytes is None  # grep-buffers alone cannot size it
    assert solve_row(mask, params.env(16), SEED_B16_MASK) == (
        "draft_model_config_num_draft_tokens", 9)
    assert solve_row(mask, params.env(16), SEED_B16_MASK + 1) is None
    kv = next(r for r in rep.rows if r.attr == "cuda_graph_kv_indices")
    assert solve_row(kv, params.env(16), SEED_B16_MASK) is None  # fully known: nothing to solve


def _finding_text(size: int, kernel: str = "write_tree_mask_kernel") -> str:
    return ("========= COMPUTE-SANITIZER\n"
            "========= Invalid __global__ write of size 1 bytes\n"
            f"=========     at {kernel}+0x2b0 in kernels.py:42\n"
            "=========     by thread (3,0,0) in block (0,10,0)\n"
            "=========     Access to 0x7f0000000000 is out of bounds\n"
            f"=========     and is 4,608 bytes after the nearest allocation at 0x7effff000000 "
            f"of size {size:,} bytes\n"
            "========= ERROR SUMMARY: 1 error\n")


def test_name_buffer_solved_and_exact() -> None:
    rep, params = tb_buffer_report()
    san = parse_memcheck(_finding_text(SEED_B16_MASK))
    buf, how = name_buffer(san, rep, params, 16)
    assert buf is not None and buf["attr"] == "cuda_graph_custom_mask"
    assert buf["solved"] == {"draft_model_config_num_draft_tokens": 9}
    assert buf["file"].endswith("triton_backend.py") and buf["line"] == MASK_LINE
    assert how == "size with draft_model_config_num_draft_tokens = 9"
    rep9, params9 = tb_buffer_report(draft_model_config_num_draft_tokens=9)
    buf, how = name_buffer(san, rep9, params9, 16)
    assert buf is not None and buf["attr"] == "cuda_graph_custom_mask" and how == "exact size"
    assert buf["bytes"] == SEED_B16_MASK
    none, why = name_buffer(parse_memcheck(_finding_text(12345, "gemm_kernel")), rep, params, 16)
    assert none is None and "no grep-buffers row evaluates to 12,345 bytes" in why
    # (req_pool_size + 1,) int64 "solves" 65,536 B too, but only flagged rows are solved for
    none, _ = name_buffer(parse_memcheck(_finding_text(65536, "gemm_kernel")), rep, params, 16)
    assert none is None


def test_the_closest_finding_names_the_buffer() -> None:
    """memcheck attributes each bad access to the allocation nearest to it: the finding just
    past the undersized buffer is the one to trust, whatever order they were printed in."""
    far = _finding_text(65536).replace("4,608 bytes after", "1,457,057 bytes after")
    near = _finding_text(SEED_B16_MASK).replace("0x7effff000000", "0x7eaaaa000000")
    san = parse_memcheck(far + near)
    assert [f.allocation_size for f in san.findings] == [65536, SEED_B16_MASK]
    rep, params = tb_buffer_report()
    buf, how = name_buffer(san, rep, params, 16)
    assert buf is not None and buf["attr"] == "cuda_graph_custom_mask"
    assert buf["solved"] == {"draft_model_config_num_draft_tokens": 9}, how


def test_the_sanitized_launch_wraps_the_command_and_turns_caching_off() -> None:
    base = Launch(argv=("python3", "-m", "sglang.launch_server", "--port", "1"),
                  server_args=("--port", "1"), env=(("A", "1"), (NO_CACHING[0], "0")),
                  config=Config(budget=16), checked=True)
    got = sanitized_launch(base, "/usr/local/cuda/bin/compute-sanitizer")
    assert got.argv == ("/usr/local/cuda/bin/compute-sanitizer", *SANITIZER_ARGS, *base.argv)
    assert SANITIZER_ARGS == ("--tool", "memcheck", "--print-limit", "1000")
    assert got.env_dict == {"A": "1", "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    assert got.server_args == base.server_args and got.checked  # the flags check still applies


def test_captured_h200_memcheck_of_the_cuda_testbed_names_the_custom_mask() -> None:
    """Real compute-sanitizer output: the CUDA testbed at seed graph b16 on an H200, one request
    (benchmarks/gpu_smoke.sh, docs/gpu-results.md). The 20 errors printed are writes of one far
    row, which memcheck puts next to an unrelated 64 KiB allocation: no size names the buffer,
    the writing kernel does."""
    san = parse_memcheck((DATA / "testbed-h200-memcheck-b16.txt").read_text())
    assert san.ran and san.error_count == 474 and len(san.findings) == 1
    f = san.findings[0]
    assert (f.kernel, f.access, f.space, f.size) == ("write_tree_mask_kernel", "write",
                                                     "__global__", 1)
    assert f.location == "kernels.py:37" and f.count == 20 and f.block == "0,14,0"
    assert (f.allocation_size, f.distance, f.direction) == (65536, 1457057, "after")
    rep, params = tb_buffer_report()
    buf, how = name_buffer(san, rep, params, 16)
    assert buf is not None and buf["attr"] == "cuda_graph_custom_mask" and buf["line"] == MASK_LINE
    assert how.startswith("kernel write_tree_mask_kernel is the writer of the only flagged")
    assert "65,536 B, 1,457,057 B after it" in how


# -- the cell, end to end ------------------------------------------------------------------
@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_prefix(tmp_path_factory.mktemp("san-tb") / "site")


def _write_stand_in(tmp_path: Path, text: str = STAND_IN) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "compute-sanitizer"
    exe.write_text(text)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return bindir


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    return _write_stand_in(tmp_path)


def test_cell_runs_the_config_under_the_sanitizer_and_sends_one_request(
        ssh_opts, prefix: Path, tmp_path: Path, stand_in: Path) -> None:
    host = sanitize_host(prefix, tmp_path, stand_in)
    with connect(host, ssh_opts) as r:
        cell = run_sanitize_cell(r, host, Config(budget=8), log_dir=tmp_path / "logs")
    assert cell.kind == "sanitize" and cell.outcome is Outcome.OK, cell.to_dict()
    assert cell.launch[0].endswith("/compute-sanitizer") and cell.launch[1:5] == list(
        SANITIZER_ARGS)
    assert cell.answered is True and cell.sanitizer["ran"] and cell.sanitizer["clean"]
    assert cell.buffer is None and cell.buffer_match == "no out-of-bounds access reported"
    log = Path(cell.local_log).read_text()
    assert "stand-in: --tool memcheck --print-limit 1000 caching-off=1" in log
    prompts = [int(n) for n in re.findall(r"Prefill batch\. #new-seq: 1, #new-token: (\d+)", log)]
    assert len([n for n in prompts if n > 10]) == 1  # one request (the others: warm-up, health)
    assert {"restart", "health", "request", "stop", "total"} <= set(cell.timings)
    assert cell.stop["clean"] and not (tmp_path / "work" / "server.json").exists()


def test_cell_reports_a_crash_with_the_servers_signature(ssh_opts, prefix: Path, tmp_path: Path,
                                                         stand_in: Path) -> None:
    host = sanitize_host(prefix, tmp_path, stand_in)
    with connect(host, ssh_opts) as r:
        cell = run_sanitize_cell(r, host, Config(budget=16))
    assert cell.outcome is Outcome.CRASH, cell.to_dict()
    assert cell.signature is not None and cell.signature.kind == "cuda_illegal_address"
    # the simulated device has no memcheck: the sanitizer ran and found nothing to name
    assert cell.sanitizer["ran"] and cell.sanitizer["findings"] == []
    assert cell.answered is False


@pytest.mark.skipif(bool(shutil.which("compute-sanitizer"))
                    or os.path.exists("/usr/local/cuda/bin/compute-sanitizer"),
                    reason="compute-sanitizer is installed here")
def test_cell_without_a_sanitizer_is_an_error_that_says_so(ssh_opts, prefix: Path,
                                                           tmp_path: Path) -> None:
    host = sanitize_host(prefix, tmp_path, None)
    with connect(host, ssh_opts) as r:
        cell = run_sanitize_cell(r, host, Config(budget=16))
    assert cell.outcome is Outcome.ERROR and cell.kind == "sanitize"
    assert cell.error == "compute-sanitizer not found on san"
    assert cell.sanitizer is None


def test_captured_h200_memcheck_with_a_higher_print_limit_names_the_mask_by_size() -> None:
    """The second H200 run (print limit 1000): some writes are now placed right after the
    mask's own allocation, whose size (18,879,552 B = 9 draft tokens) names the buffer and
    solves the draft-token count it was sized from."""
    import gzip
    text = gzip.decompress((DATA / "testbed-h200-memcheck-b16-limit1000.txt.gz").read_bytes())
    san = parse_memcheck(text.decode())
    assert san.ran and san.error_count == 474
    sizes = {f.allocation_size for f in san.findings}
    assert 18_879_552 in sizes and all(f.kernel == "write_tree_mask_kernel" for f in san.findings)
    rep, params = tb_buffer_report()
    buf, how = name_buffer(san, rep, params, 16)
    assert buf is not None and buf["attr"] == "cuda_graph_custom_mask" and buf["line"] == MASK_LINE
    assert buf["bytes"] == 18_879_552
    assert buf["solved"] == {"draft_model_config_num_draft_tokens": 9}


# memcheck's stand-in that, like the real tool in a dying server, prints its findings and the
# summary only when the program ends: here when ddprobe stops the server (TERM to the group)
LATE_REPORT = """#!/bin/sh
echo "========= COMPUTE-SANITIZER"
shift 4
report() {
  sleep 0.3
  printf '%s\\n' "========= Invalid __global__ write of size 1 bytes" \\
    "=========     at write_tree_mask_kernel+0x1f0 in kernels.py:37" \\
    "=========     by thread (0,0,0) in block (0,9,0)" \\
    "=========     Access to 0x7f0001201200 is out of bounds" \\
    "=========     and is 4,609 bytes after the nearest allocation at 0x7f0000000000 of size 18,879,552 bytes" \\
    "========= ERROR SUMMARY: 1 error"
  exit 1
}
trap report TERM
"$@" &
wait $!
"""


def test_the_report_printed_while_the_server_is_stopped_is_read(ssh_opts, prefix: Path,
                                                                 tmp_path: Path) -> None:
    """The findings and ERROR SUMMARY come after the stop: the cell reads the rest of the log
    through the manager (peek) instead of losing it (issue 12, item 3)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "compute-sanitizer"
    exe.write_text(LATE_REPORT)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    host = sanitize_host(prefix, tmp_path, bindir)
    with connect(host, ssh_opts) as r:
        cell = run_sanitize_cell(r, host, Config(budget=8))
    san = cell.sanitizer
    assert cell.answered is True, cell.to_dict()
    assert san["error_count"] == 1 and len(san["findings"]) == 1, san
    f = san["findings"][0]
    assert f["kernel"] == "write_tree_mask_kernel" and f["allocation_size"] == 18_879_552
    assert "stop" in cell.timings and not any("could not be read" in n
                                              for n in cell.notes)


def test_a_sanitizer_that_exits_a_moment_after_its_summary_still_reads_as_a_crash(
        ssh_opts, prefix: Path, tmp_path: Path) -> None:
    """The summary is the sanitizer's last line, but its own exit comes after it: CI once read
    the wrapper between the two and called the crashed server alive ("the request failed but
    the server stayed up"). Here the gap is made wide; the cell must wait for the exit."""
    lingering = STAND_IN.replace('echo "========= ERROR SUMMARY: 0 errors"\n',
                                 'echo "========= ERROR SUMMARY: 0 errors"\nsleep 1\n')
    assert lingering != STAND_IN
    host = sanitize_host(prefix, tmp_path, _write_stand_in(tmp_path, lingering))
    with connect(host, ssh_opts) as r:
        cell = run_sanitize_cell(r, host, Config(budget=16))
    assert cell.outcome is Outcome.CRASH, cell.to_dict()
    assert cell.signature is not None and cell.signature.kind == "cuda_illegal_address"
