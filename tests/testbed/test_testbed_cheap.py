"""The testbed's cheap-cell flags behave like SGLang's: `--load-format dummy` loads in a fraction
of the time and gives random-weight output (garbage, acceptance near 1) with every buffer,
capture and crash unchanged; `--cuda-graph-bs` captures only the sizes given (its largest is
the max bs); the load and capture lines carry their elapsed times in SGLang's wording."""
from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from testbed_util import (
    chat_text,
    coding_score,
    ddtree,
    generate,
    install_prefix,
    installed_tasks,
    running_testbed,
    start_testbed,
)

from ddprobe.cell.phases import log_phases

ILLEGAL = "CUDA error: an illegal memory access was encountered"


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_prefix(tmp_path_factory.mktemp("cheap") / "prefix")


def _load_s(log: str) -> float:
    lp = log_phases(log)
    assert lp.load_from == "elapsed", log[-2000:]
    assert lp.load_s is not None
    return lp.load_s


def test_dummy_weights_load_fast_and_give_random_output(prefix: Path) -> None:
    tasks = installed_tasks(prefix, limit=2)
    # expected: real weights pass the coding tasks with acceptance ~4-5; dummy ones fail them
    # with acceptance below 1.5; the dummy load is about 5% of the real one (load_s x 0.05)
    with running_testbed(prefix, *ddtree(8), scenario="healthy", startup_scale=0.01) as s:
        real_load = _load_s(s.log())
        passed, accepts = coding_score(s.url, tasks, max_tokens=200)
    assert passed == len(tasks) and min(accepts) > 2.5
    with running_testbed(prefix, *ddtree(8), "--load-format", "dummy", scenario="healthy",
                         startup_scale=0.01) as s:
        dummy_load = _load_s(s.log())
        passed, accepts = coding_score(s.url, tasks, max_tokens=64)
        ids = generate(s.url, chat_text(tasks[0]["prompt"]), max_new_tokens=48)["output_ids"]
    assert passed == 0 and max(accepts) < 1.5
    assert len(ids) == 48  # random weights never say EOS
    assert dummy_load < real_load * 0.3, (dummy_load, real_load)


def test_dummy_draft_alone_keeps_the_output_and_loses_acceptance(prefix: Path) -> None:
    tasks = installed_tasks(prefix, limit=1)
    with running_testbed(prefix, *ddtree(8), "--speculative-draft-load-format", "dummy",
                         scenario="healthy") as s:
        passed, accepts = coding_score(s.url, tasks, max_tokens=200)
        assert "Using draft model load_format: 'dummy'" in s.log()
    assert passed == 1 and max(accepts) < 1.5


def test_cuda_graph_bs_captures_only_those_sizes_and_sets_the_max(prefix: Path) -> None:
    with running_testbed(prefix, *ddtree(8), "--cuda-graph-bs", "1", "4", "64",
                         scenario="healthy") as s:
        log = s.log()
    assert "Capture cuda graph bs [1, 4, 64]" in log
    assert re.search(r"Capture cuda graph end\. Time elapsed: \d+\.\d\d s\.", log)
    assert "cuda_graph_max_bs=64" in log
    with running_testbed(prefix, *ddtree(8), "--cuda-graph-max-bs", "64", "--cuda-graph-bs",
                         "1", "2", scenario="healthy") as s:
        assert "cuda_graph_max_bs=2" in s.log()  # the list wins, as in SGLang 0.5.11


def test_capture_time_is_per_captured_batch_size(prefix: Path) -> None:
    # 12 default sizes up to 64 vs 2: at 1.5 s per size x startup scale 0.01 the default
    # capture takes ~0.18 s and the short one ~0.03 s
    with running_testbed(prefix, *ddtree(8), scenario="healthy", startup_scale=0.01) as s:
        full = log_phases(s.log()).capture_s
    with running_testbed(prefix, *ddtree(8), "--cuda-graph-bs", "1", "64", scenario="healthy",
                         startup_scale=0.01) as s:
        short = log_phases(s.log()).capture_s
    assert full is not None and short is not None
    assert short < full / 2, (short, full)


def test_dummy_weights_keep_the_seed_crashes(prefix: Path) -> None:
    # b16: the graph mask overflow kills the server on the first request; b64: cuBLAS fails at
    # capture; both with random weights and a short capture list holding the max bs
    cheap = ["--load-format", "dummy", "--cuda-graph-bs", "1", "2", "4", "8", "64",
             "--skip-server-warmup"]
    with running_testbed(prefix, *ddtree(16), *cheap) as s:
        with pytest.raises(httpx.HTTPError):
            generate(s.url, chat_text("Write fizzbuzz."), max_new_tokens=64, timeout=10)
        assert s.wait_exit(15) != 0
        assert ILLEGAL in s.log()
    s = start_testbed(prefix, *ddtree(64), *cheap)
    try:
        assert s.wait_exit(15) != 0
        assert "CUBLAS_STATUS_EXECUTION_FAILED" in s.log()
    finally:
        s.stop()
