"""Each defect fires only under its conditions: the kernel defect (eager too, one arch, one
backend), buffer sizing with another threshold, the hangs; and with no defects speculative
output is exactly the target's greedy output at every budget, with and without graphs."""
from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx
import pytest
from testbed_util import (
    TestbedServer,
    chat_text,
    coding_score,
    ddtree,
    generate,
    install_prefix,
    installed_tasks,
    running_testbed,
)

ILLEGAL = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_prefix(tmp_path_factory.mktemp("defects") / "prefix")


@pytest.fixture(scope="module")
def tasks(prefix: Path) -> list[dict]:
    return installed_tasks(prefix, limit=3)


def outputs(server: TestbedServer, prompts: list[str], **sampling: object) -> list[list[int]]:
    return [generate(server.url, p, max_new_tokens=160, **sampling)["output_ids"] for p in prompts]


def test_healthy_speculation_is_lossless_at_every_budget(prefix: Path, tasks: list[dict]) -> None:
    prompts = [chat_text(t["prompt"]) for t in tasks] + [
        chat_text("How do I read a log file?"), "Careful notes turn a long night"]
    with running_testbed(prefix, scenario="healthy") as s:  # no speculation: plain greedy decode
        baseline = outputs(s, prompts)
    assert all(len(o) > 5 for o in baseline)
    configs = [ddtree(8), ddtree(16), ddtree(64), ddtree(16, graph=False),
               ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]]
    for flags in configs:
        with running_testbed(prefix, *flags, scenario="healthy") as s:
            assert outputs(s, prompts) == baseline, flags


def test_sampling_is_lossless_for_a_fixed_seed(prefix: Path, tasks: list[dict]) -> None:
    prompts = [chat_text("Tell me a story about GPUs."), chat_text(tasks[0]["prompt"])]
    sampling = {"temperature": 100.0, "sampling_seed": 7}  # high T: many sampled deviations
    with running_testbed(prefix, scenario="healthy") as s:
        baseline = outputs(s, prompts, **sampling)
        greedy = outputs(s, prompts)
    assert baseline != greedy
    with running_testbed(prefix, *ddtree(16), scenario="healthy") as s:
        assert outputs(s, prompts, **sampling) == baseline


@pytest.mark.parametrize("graph", [True, False])
def test_kernel_defect_garbles_wide_trees_in_both_modes(prefix: Path, tasks: list[dict],
                                                        graph: bool) -> None:
    with running_testbed(prefix, *ddtree(16, graph=graph), scenario="kernel") as s:
        passed, _ = coding_score(s.url, tasks, max_tokens=200)
        alive = s.proc.poll() is None
    assert passed == 0 and alive
    with running_testbed(prefix, *ddtree(8, graph=graph), scenario="kernel") as s:
        passed, _ = coding_score(s.url, tasks)
    assert passed == len(tasks)  # trees within one 16-row tile are fine


def test_kernel_defect_is_one_backend_on_one_arch(prefix: Path, tasks: list[dict],
                                                  tmp_path: Path) -> None:
    with running_testbed(prefix, *ddtree(16), "--attention-backend", "torch_native",
                         scenario="kernel") as s:
        assert coding_score(s.url, tasks)[0] == len(tasks)
    other_gpu = tmp_path / "h200.yaml"
    text = (prefix / "ddtestbed/scenarios/kernel.yaml").read_text()
    other_gpu.write_text(text.replace("name: NVIDIA B300 SXM6", "name: NVIDIA H200")
                         .replace("  arch: sm_103\n  memory_gib", "  arch: sm_90\n  memory_gib"))
    with running_testbed(prefix, *ddtree(16), scenario=str(other_gpu)) as s:
        assert coding_score(s.url, tasks)[0] == len(tasks)


def test_late_buffer_sizing_fires_only_above_its_threshold(prefix: Path, tasks: list[dict]) -> None:
    with running_testbed(prefix, *ddtree(32), scenario="late") as s:
        assert coding_score(s.url, tasks)[0] == len(tasks)
    with running_testbed(prefix, *ddtree(64), scenario="late") as s:
        with pytest.raises(httpx.HTTPError):
            generate(s.url, chat_text(tasks[0]["prompt"]))
        assert s.wait_exit() != 0
    assert ILLEGAL in s.log()


def test_seed_b16_still_crashes_with_max_bs_40(prefix: Path, tasks: list[dict]) -> None:
    # The graph mask is node-major, so fewer batch slots do not give a request more room. (With
    # a much smaller max bs the mask lands in a shared 20 MiB segment and the overrun is silent.)
    with running_testbed(prefix, *ddtree(16), "--cuda-graph-max-bs", "40") as s:
        with pytest.raises(httpx.HTTPError):
            generate(s.url, chat_text(tasks[0]["prompt"]))
        assert s.wait_exit() != 0
    assert ILLEGAL in s.log()


def test_hang_scenario_listens_but_is_never_healthy(prefix: Path) -> None:
    with running_testbed(prefix, *ddtree(8), scenario="hang", wait=False) as s:
        deadline = time.perf_counter() + 15
        while time.perf_counter() < deadline and "Uvicorn running" not in s.log():
            time.sleep(0.05)
        statuses = []
        for _ in range(5):
            statuses.append(httpx.get(s.url + "/health", timeout=5).status_code)
            time.sleep(0.2)
        assert statuses == [503] * 5 and s.proc.poll() is None
        assert "fired up" not in s.log()


def test_hang_at_load_never_opens_the_port(prefix: Path, tmp_path: Path) -> None:
    stuck = tmp_path / "stuck.yaml"
    stuck.write_text((prefix / "ddtestbed/scenarios/healthy.yaml").read_text()
                     .replace("defects: {}", "defects:\n  hang: load"))
    with running_testbed(prefix, *ddtree(8), scenario=str(stuck), wait=False) as s:
        deadline = time.perf_counter() + 15
        while time.perf_counter() < deadline and "Load weight begin" not in s.log():
            time.sleep(0.05)
        time.sleep(1.0)
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", s.port)) != 0
        assert s.proc.poll() is None and "Load weight end" not in s.log()


def test_tp_size_beyond_the_gpus_is_refused(prefix: Path) -> None:
    with running_testbed(prefix, *ddtree(8), "--tp-size", "16", wait=False) as s:
        assert s.wait_exit() == 2
    assert "--tp-size 16 is larger than the number of GPUs (8 x NVIDIA B300 SXM6)" in s.log()
