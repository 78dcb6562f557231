"""The seed matrix (shared/seed) end to end over HTTP, and the experiments that tell the three
failure modes apart: enlarge the mask buffer, apply the fix patch, lower max bs, enlarge the
cuBLAS workspace. Everything runs against installed copies, as ddprobe would."""
from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import threading
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
)

from ddtestbed.scenario import load_scenario

PATCH = Path(__file__).resolve().parents[2] / "playbooks" / "patches" / \
    "ddtestbed-custom-mask.patch"
MASK_SHAPE = "(num_tokens_per_bs * max_bs * (self.max_context_len + num_tokens_per_bs),)"
ILLEGAL = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_prefix(tmp_path_factory.mktemp("seed") / "prefix")


@pytest.fixture(scope="module")
def tasks(prefix: Path) -> list[dict]:
    return installed_tasks(prefix)


def copy_install(prefix: Path, dest: Path) -> Path:
    shutil.copytree(prefix, dest)
    return dest


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not found once in {path}"
    path.write_text(text.replace(old, new))


# -- the matrix -----------------------------------------------------------------------------
def test_graph_b8_is_ok(prefix: Path, tasks: list[dict]) -> None:
    with running_testbed(prefix, *ddtree(8)) as s:
        passed, accepts = coding_score(s.url, tasks)
        info = httpx.get(s.url + "/server_info").json()
        avg = info["internal_states"][0]["avg_spec_accept_length"]
    assert passed == len(tasks)
    assert 3.3 < statistics.mean(accepts) < 5.5 and 3.8 < avg < 5.2  # seed: 4.48


def test_graph_b16_crashes_at_the_first_request(prefix: Path, tasks: list[dict]) -> None:
    with running_testbed(prefix, *ddtree(16)) as s:  # it does come up healthy
        errors: list[BaseException] = []

        def request() -> None:
            try:
                generate(s.url, chat_text(tasks[0]["prompt"]))
            except httpx.HTTPError as e:
                errors.append(e)

        threads = [threading.Thread(target=request) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        code = s.wait_exit()
    assert len(errors) == 3  # every in-flight request fails
    assert code != 0
    log = s.log()
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    assert ILLEGAL in log and "in write_tree_mask" in log
    assert "Received sigquit from a child process." in log


def test_graph_b32_gives_garbage_with_acceptance_one(prefix: Path, tasks: list[dict]) -> None:
    with running_testbed(prefix, *ddtree(32)) as s:
        passed, accepts = coding_score(s.url, tasks, max_tokens=160)
        out = generate(s.url, chat_text(tasks[0]["prompt"]), max_new_tokens=64)
        alive = s.proc.poll() is None
    assert passed == 0 and alive
    assert max(accepts) < 1.1  # (1 prefill token + 1 per verify) / verifies
    assert "```python" not in out["text"] and len(out["output_ids"]) == 64
    assert re.search(r"accept len: 1\.00, accept rate: 0\.0\d", s.log())


def test_graph_b64_fails_at_startup_in_cublas(prefix: Path) -> None:
    with running_testbed(prefix, *ddtree(64), wait=False) as s:
        assert s.wait_exit() != 0
    log = s.log()
    assert "Capturing batches (bs=64 " in log
    assert ("Exception: Capture cuda graph failed: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED "
            "when calling `cublasGemmEx( handle, opa, opb, m, n, k,") in log
    assert "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)" in log
    assert "Uvicorn running" not in log


@pytest.mark.parametrize("budget", [16, 32])
def test_eager_works_with_higher_acceptance(prefix: Path, tasks: list[dict], budget: int) -> None:
    with running_testbed(prefix, *ddtree(8)) as s:
        _, base = coding_score(s.url, tasks)
    with running_testbed(prefix, *ddtree(budget, graph=False)) as s:
        passed, accepts = coding_score(s.url, tasks)
    assert passed == len(tasks)
    assert statistics.mean(accepts) > statistics.mean(base) + 0.3
    assert "cuda graph: False" in s.log()


def sim_tok_s(url: str, tasks: list[dict], *, graph: bool, scale: float) -> float:
    """Throughput by the seed scenario's cost model over the server's own step counts (no
    wall clock: benchmarks/testbed_speed.py measures the real tok/s side by side). Also checks
    that the server really spends the simulated time (a one-sided bound: load only adds)."""
    t = load_scenario("seed").timing
    tokens = sim = 0.0
    for task in tasks:
        meta = generate(url, chat_text(task["prompt"]), max_new_tokens=512)["meta_info"]
        verify = meta["spec_verify_ct"]
        draft_tokens = meta["spec_draft_token_num"] / verify + 1
        # one request at a time: batch 1 (graph replay pads to the captured bs 1)
        step_ms = t.step_base_ms + t.step_per_token_ms * 1 * draft_tokens + \
            (0.0 if graph else t.eager_overhead_ms)
        s = (t.prefill_base_ms + t.prefill_per_token_ms * meta["prompt_tokens"]
             + verify * step_ms) / 1000.0
        assert meta["e2e_latency"] >= 0.9 * s * scale, (meta, s)
        tokens += meta["completion_tokens"]
        sim += s
    return tokens / sim


def test_eager_b16_is_about_2_5x_slower_than_graph_b8(prefix: Path, tasks: list[dict]) -> None:
    timing = {"time_scale": 0.05, "startup_scale": 0.001}
    with running_testbed(prefix, *ddtree(8), **timing) as s:
        graph = sim_tok_s(s.url, tasks, graph=True, scale=0.05)
    with running_testbed(prefix, *ddtree(16, graph=False), **timing) as s:
        eager = sim_tok_s(s.url, tasks, graph=False, scale=0.05)
    assert 1.9 < graph / eager < 3.3, (graph, eager)  # seed: 285 vs 111 tok/s


# -- experiments ---------------------------------------------------------------------------
def test_enlarging_the_mask_cures_b16_but_not_b32(prefix: Path, tasks: list[dict],
                                                  tmp_path: Path) -> None:
    big = copy_install(prefix, tmp_path / "big")
    backend = big / "ddtestbed/srt/layers/attention/triton_backend.py"
    edit(backend, MASK_SHAPE, "(4 * " + MASK_SHAPE[:-2] + "),)")
    with running_testbed(big, *ddtree(16)) as s:
        passed, _ = coding_score(s.url, tasks)
    assert passed == len(tasks)
    with running_testbed(big, *ddtree(32)) as s:
        passed, accepts = coding_score(s.url, tasks[:2], max_tokens=160)
    assert passed == 0 and max(accepts) < 1.1  # (b) is not a buffer that is too small


def test_the_fix_patch_makes_graph_b16_work(prefix: Path, tasks: list[dict],
                                            tmp_path: Path) -> None:
    fixed = copy_install(prefix, tmp_path / "fixed")
    header = PATCH.read_text().split("--- a/", 1)[0]
    assert "# id: ddtestbed-custom-mask\n" in header and "# package: ddtestbed\n" in header
    assert "# versions: 0.1.0\n" in header
    subprocess.run(["patch", "-p1", "--forward", "-i", str(PATCH)], cwd=fixed / "ddtestbed",
                   check=True, capture_output=True)
    with running_testbed(fixed, *ddtree(16)) as s:
        passed, accepts = coding_score(s.url, tasks)
    assert passed == len(tasks) and statistics.mean(accepts) > 4.0
    res = subprocess.run(["patch", "-p1", "-R", "--dry-run", "-i", str(PATCH)],
                         cwd=fixed / "ddtestbed", capture_output=True)
    assert res.returncode == 0  # revertible


def test_lower_max_bs_or_bigger_workspace_cures_the_cublas_failure(prefix: Path,
                                                                   tmp_path: Path) -> None:
    with running_testbed(prefix, *ddtree(64), "--cuda-graph-max-bs", "32") as s:
        assert "CUBLAS_STATUS" not in s.log()
    roomy = copy_install(prefix, tmp_path / "roomy")
    edit(roomy / "ddtestbed/srt/layers/linear.py", "CUBLAS_WORKSPACE_BYTES = 4 * 1024 * 1024",
         "CUBLAS_WORKSPACE_BYTES = 32 * 1024 * 1024")
    with running_testbed(roomy, *ddtree(64)) as s:
        assert "Capture cuda graph end." in s.log()


def test_defects_need_cuda_graphs(prefix: Path, tasks: list[dict]) -> None:
    with running_testbed(prefix, *ddtree(64, graph=False)) as s:
        passed, _ = coding_score(s.url, tasks)
    assert passed == len(tasks)
