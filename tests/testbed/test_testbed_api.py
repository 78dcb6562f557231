"""The testbed's HTTP API, flags and logs, over real HTTP against an installed copy, compared
with field names read from the real SGLang 0.5.10 wheel."""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import threading
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from testbed_util import (
    TestbedServer,
    chat,
    chat_text,
    ddtree,
    generate,
    install_prefix,
    installed_tasks,
    passes,
    running_testbed,
    suite_for_tests,
)


@pytest.fixture(scope="module")
def wheel_source(sglang_wheel: Callable[[str], Path]) -> Callable[[str], str]:
    """A file of the real SGLang 0.5.10 wheel (the harness's cached download), as text."""
    whl = sglang_wheel("0.5.10")

    def read(member: str) -> str:
        with zipfile.ZipFile(whl) as z:
            return z.read(member).decode()
    return read


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_prefix(tmp_path_factory.mktemp("tb") / "prefix")


@pytest.fixture(scope="module")
def tasks(prefix: Path) -> list[dict]:
    return installed_tasks(prefix)


@pytest.fixture(scope="module")
def server(prefix: Path) -> Iterator[TestbedServer]:
    with running_testbed(prefix, *ddtree(8), "--enable-metrics", "--decode-log-interval", "1",
                         scenario="healthy") as s:
        yield s


def test_starts_in_seconds_at_test_scale(prefix: Path) -> None:
    with running_testbed(prefix, *ddtree(8), scenario="seed", startup_scale=None) as s:
        elapsed = s.wait_healthy()
    # a generous behavioural bound (the seed's real restart took six minutes; the testbed's
    # speed is measured side by side in benchmarks/testbed_speed.py, not asserted here)
    assert elapsed < 20.0, f"start-up took {elapsed:.2f}s"


def test_generate_meta_info_uses_sglang_field_names(server: TestbedServer, tasks: list[dict],
                                                    wheel_source: Callable[[str], str]) -> None:
    src = wheel_source("sglang/srt/managers/tokenizer_manager.py")
    sglang_keys = set(re.findall(r'meta_info\["(\w+)"\]', src)) | set(re.findall(r'"(\w+)":', src))
    out = generate(server.url, chat_text(tasks[0]["prompt"]), max_new_tokens=512)
    meta = out["meta_info"]
    assert set(out) == {"text", "output_ids", "meta_info"}
    assert set(meta) <= sglang_keys, set(meta) - sglang_keys
    for key in ("id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens",
                "e2e_latency", "spec_verify_ct", "spec_accept_length", "spec_accept_rate",
                "spec_accept_histogram"):
        assert key in meta
    assert meta["finish_reason"] == {"type": "stop", "matched": 2}
    assert meta["spec_accept_length"] == pytest.approx(
        meta["completion_tokens"] / meta["spec_verify_ct"])
    assert sum(meta["spec_accept_histogram"]) == meta["spec_verify_ct"]
    assert meta["spec_accept_rate"] == pytest.approx(
        meta["spec_accept_token_num"] / (meta["spec_verify_ct"] * 8))
    assert out["text"] == "```python\n" + tasks[0]["solution"] + "\n```"


def test_server_info_is_sglang_server_args_plus_state(server: TestbedServer,
                                                      wheel_source: Callable[[str], str]) -> None:
    tree = ast.parse(wheel_source("sglang/srt/server_args.py"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    sglang_fields = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}
    generate(server.url, chat_text("hello"), max_new_tokens=40)
    info = httpx.get(server.url + "/server_info").json()
    assert httpx.get(server.url + "/get_server_info").json().keys() == info.keys()
    ours = {k for k in info if not k.startswith("testbed_")} - {
        "speculative_ddtree_budget",  # SGLang PR #29907, not in 0.5.10
        "internal_states", "version", "max_total_num_tokens", "max_req_input_len"}
    assert ours <= sglang_fields, ours - sglang_fields
    assert (info["speculative_num_draft_tokens"], info["speculative_ddtree_budget"]) == (9, 8)
    assert (info["disable_cuda_graph"], info["cuda_graph_max_bs"], info["attention_backend"]) == (
        False, 64, "triton")
    assert info["version"] == "0.1.0"
    assert 2.0 < info["internal_states"][0]["avg_spec_accept_length"] < 9.0


def test_model_endpoints(server: TestbedServer) -> None:
    models = httpx.get(server.url + "/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "sim"
    assert models["data"][0]["max_model_len"] == 32768
    info = httpx.get(server.url + "/get_model_info").json()
    assert info["model_path"] == "sim" and info["is_generation"] is True


def test_chat_completion_shape_and_code_answer(server: TestbedServer, tasks: list[dict]) -> None:
    res = chat(server.url, "Solve this:\n" + tasks[1]["prompt"])
    assert res["object"] == "chat.completion" and res["model"] == "sim"
    choice = res["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == "```python\n" + tasks[1]["solution"] + "\n```"
    assert choice["finish_reason"] == "stop"
    usage = res["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


def _sse(res: httpx.Response) -> list[dict]:
    events = [line[len("data: "):] for line in res.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_streaming_chat_and_completions(server: TestbedServer, tasks: list[dict]) -> None:
    body = {"messages": [{"role": "user", "content": tasks[0]["prompt"]}], "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=30) as res:
        assert res.headers["content-type"] == "text/event-stream"
        chunks = _sse(res)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == chat(server.url, tasks[0]["prompt"])["choices"][0]["message"]["content"]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    with httpx.stream("POST", server.url + "/v1/completions", timeout=30,
                      json={"prompt": "The scheduler", "stream": True, "temperature": 0}) as res:
        parts = _sse(res)
    plain = httpx.post(server.url + "/v1/completions", timeout=30,
                       json={"prompt": "The scheduler", "temperature": 0}).json()
    assert plain["object"] == "text_completion" and plain["usage"]["completion_tokens"] == 16
    assert "".join(p["choices"][0]["text"] for p in parts) == plain["choices"][0]["text"]


def test_native_streaming_is_cumulative(server: TestbedServer) -> None:
    body = {"text": chat_text("hi"), "stream": True,
            "sampling_params": {"temperature": 0, "max_new_tokens": 30}}
    with httpx.stream("POST", server.url + "/generate", json=body, timeout=30) as res:
        outs = _sse(res)
    texts = [o["text"] for o in outs]
    assert len(outs) >= 2 and all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))
    assert outs[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 30}
    assert outs[0]["meta_info"]["finish_reason"] is None
    body["sampling_params"] = {"temperature": 0, "max_new_tokens": 200, "stop": " the"}
    with httpx.stream("POST", server.url + "/generate", json=body, timeout=30) as res:
        outs = _sse(res)
    texts = [o["text"] for o in outs]
    # the stop string never leaks
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))
    assert outs[-1]["meta_info"]["finish_reason"] == {"type": "stop", "matched": " the"}
    assert texts[-1] == generate(server.url, chat_text("hi"), max_new_tokens=200,
                                 stop=" the")["text"]


def test_sampling_params_stop_input_ids_and_batches(server: TestbedServer,
                                                    tasks: list[dict]) -> None:
    out = generate(server.url, chat_text(tasks[0]["prompt"]), stop=["return"])
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": "return"}
    assert out["text"].endswith("    ") and "return" not in out["text"]
    by_ids = httpx.post(server.url + "/generate", json={
        "input_ids": [10, 11, 12],
        "sampling_params": {"max_new_tokens": 5, "temperature": 0}}).json()
    assert by_ids["meta_info"]["prompt_tokens"] == 3 and len(by_ids["output_ids"]) == 5
    batch = httpx.post(server.url + "/generate", timeout=30, json={
        "text": [chat_text("a"), chat_text("b")],
        "sampling_params": {"max_new_tokens": 8, "temperature": 0}}).json()
    assert isinstance(batch, list) and len(batch) == 2
    assert all(b["meta_info"]["completion_tokens"] == 8 for b in batch)


def test_bad_requests_get_sglang_style_errors(server: TestbedServer) -> None:
    res = httpx.post(server.url + "/generate", json={"text": "", "sampling_params": {}})
    assert res.status_code == 400 and "empty" in res.json()["error"]["message"]
    res = httpx.post(server.url + "/generate",
                     json={"text": "x", "sampling_params": {"max_new_tokens": "9"}})
    assert res.status_code == 400 and "max_new_tokens" in res.json()["error"]["message"]
    assert httpx.post(server.url + "/generate", content=b"{nope").status_code == 422
    assert httpx.get(server.url + "/generate").status_code == 405
    assert httpx.get(server.url + "/no/such/route").status_code == 404


def test_metrics_and_flush_cache(server: TestbedServer) -> None:
    generate(server.url, chat_text("hello there"), max_new_tokens=40)
    text = httpx.get(server.url + "/metrics").text
    value = re.search(r'^sglang:spec_accept_length\{model_name="sim"[^}]*\} ([\d.]+)$', text, re.M)
    assert value and float(value.group(1)) > 1.0
    assert re.search(r"^sglang:gen_throughput\{", text, re.M)
    assert "# TYPE sglang:generation_tokens_total counter" in text
    res = httpx.post(server.url + "/flush_cache")
    assert res.status_code == 200 and res.text.startswith("Cache flushed.")


def test_concurrent_requests_are_batched_and_stay_lossless(server: TestbedServer,
                                                           tasks: list[dict]) -> None:
    prompts = [chat_text(t["prompt"]) for t in tasks[:3]] + \
        [chat_text(f"topic {i}") for i in range(3)]
    serial = [generate(server.url, p, max_new_tokens=64)["text"] for p in prompts]
    results: dict[int, str] = {}

    def worker(i: int) -> None:
        results[i] = generate(server.url, prompts[i], max_new_tokens=64)["text"]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i] for i in range(len(prompts))] == serial
    running = [int(n) for n in re.findall(r"Decode batch\. #running-req: (\d+),", server.log())]
    assert max(running) >= 2


def test_logs_look_like_sglang(server: TestbedServer) -> None:
    log = server.log()
    for line in ("Capture cuda graph begin. This can take up to several minutes.",
                 "Capturing batches (bs=64 avail_mem=", "Capture cuda graph end. Time elapsed: ",
                 "The server is fired up and ready to roll!", "server_args=ServerArgs(",
                 "Load weight begin.", "KV Cache is allocated. #tokens: "):
        assert line in log
    decode = re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] Decode batch\. #running-req: \d+, "
                       r"#token: \d+, token usage: \d\.\d\d, accept len: \d+\.\d\d, accept rate: "
                       r"\d\.\d\d, cuda graph: True, gen throughput \(token/s\): [\d.]+, "
                       r"#queue-req: \d+$", log, re.M)
    assert decode, log[-2000:]


def test_unknown_flag_exits_2_with_usage(prefix: Path) -> None:
    with running_testbed(prefix, "--speculative-tree-budget", "9", wait=False) as server:
        assert server.wait_exit() == 2
    log = server.log()
    assert "usage: " in log and "unrecognized arguments: --speculative-tree-budget 9" in log


def test_bad_scenario_flag_exits_2_naming_the_line(prefix: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ndefects:\n  hang: sometimes\n")
    with running_testbed(prefix, scenario=str(bad), wait=False) as server:
        assert server.wait_exit() == 2
    assert f"error: {bad}: 'defects.hang' must be one of load, warmup" in server.log()


def test_in_tree_entry_point_help() -> None:
    res = subprocess.run([sys.executable, "-m", "ddtestbed", "--help"], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[2], timeout=60)
    assert res.returncode == 0 and "--speculative-ddtree-budget" in res.stdout


def test_every_suite_task_is_answered_correctly_in_one_batch(prefix: Path,
                                                             server: TestbedServer,
                                                             tmp_path: Path) -> None:
    tasks = installed_tasks(prefix, limit=None)
    assert tasks == json.loads(suite_for_tests(tmp_path).read_text())["tasks"]  # read, not copied
    body = {"text": [chat_text(t["prompt"]) for t in tasks],
            "sampling_params": {"max_new_tokens": 1024, "temperature": 0}}
    outs = httpx.post(server.url + "/generate", json=body, timeout=120).json()
    failed = [t["id"] for t, o in zip(tasks, outs, strict=False) if not passes(t, o["text"])]
    assert failed == []
    accepts = [o["meta_info"]["spec_accept_length"] for o in outs]
    assert 4.0 < sum(accepts) / len(accepts) < 5.2  # seed b8: 4.48
