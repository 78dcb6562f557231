"""The probe client against a real HTTP server on loopback that answers like SGLang.

`SglangShapedServer` is a real threaded HTTP server (no mocks): it answers /generate,
/v1/chat/completions, /server_info or /get_server_info with the JSON shapes of the SGLang
versions ddprobe supports (meta_info field names from the 0.4.10-0.5.23 wheels'
tokenizer_manager.py), using the coding suite's reference solutions as the model's answers.
Other probe tests import it from here.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ddprobe.probes.client import (SRC_ACCEPTED_COUNT, SRC_SPEC_ACCEPT_LENGTH, SRC_VERIFY_CT,
                                   ProbeClient, ProbeHTTPError, accept_from_meta,
                                   server_accept_length)
from ddprobe.probes.coding import load_suite


@dataclass
class Behaviour:
    """What the server does; tests change it between requests."""

    answer: Callable[[str], str] | None = None  # prompt -> answer text (default: the solution)
    dialect: str = "new"  # new | old (no spec_accept_length) | oldest (counts) | none
    accept: float = 3.5  # tokens per verify step
    server_info: str = "new"  # new (/server_info) | old (/get_server_info only) | none
    delay_s: float = 0.0
    status: int = 200
    requests: list[str] = field(default_factory=list)
    # hold each POST until this many are in flight (or hold_timeout_s passed): a concurrent
    # client reaches it at once, a sequential one never does (no clock in the assertion)
    hold_until_inflight: int = 0
    hold_timeout_s: float = 10.0
    inflight: int = 0
    peak_inflight: int = 0
    held_out: int = 0  # POSTs whose hold ended by the timeout, not by the others arriving


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # like uvicorn's backlog: concurrent probes must not queue in SYN
    daemon_threads = True


class SglangShapedServer:
    def __init__(self) -> None:
        self.behaviour = Behaviour()
        self.suite = load_suite("coding")
        self._by_prompt = {t.prompt: t for t in self.suite.tasks}
        self.total_verify = 0
        self.total_tokens = 0
        lock = threading.Lock()
        arrived = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _send(self, code: int, doc: Any) -> None:
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                b = outer.behaviour
                b.requests.append("GET " + self.path)
                avg = outer.total_tokens / outer.total_verify if outer.total_verify else 0.0
                info = {"internal_states": [{"avg_spec_accept_length": round(avg, 4)}],
                        "version": "0.5.10"}
                if self.path == "/server_info" and b.server_info == "new":
                    self._send(200, info)
                elif self.path == "/get_server_info" and b.server_info in ("new", "old"):
                    self._send(200, info)
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                b = outer.behaviour
                n = int(self.headers.get("Content-Length") or 0)
                req = json.loads(self.rfile.read(n) or b"{}")
                b.requests.append("POST " + self.path)
                with arrived:
                    b.inflight += 1
                    b.peak_inflight = max(b.peak_inflight, b.inflight)
                    arrived.notify_all()
                    if b.hold_until_inflight and not arrived.wait_for(
                            lambda: b.peak_inflight >= b.hold_until_inflight,
                            timeout=b.hold_timeout_s):
                        b.held_out += 1
                try:
                    self._post(b, req)
                finally:
                    with arrived:
                        b.inflight -= 1

            def _post(self, b: Behaviour, req: dict[str, Any]) -> None:
                if b.delay_s:
                    time.sleep(b.delay_s)
                if b.status != 200:
                    self._send(b.status, {"error": {"message": "Internal Server Error"}})
                    return
                if self.path == "/v1/chat/completions":
                    prompt = req["messages"][-1]["content"]
                    text = outer.answer(prompt)
                    toks = max(1, len(text.split()))
                    self._send(200, {"id": "x", "object": "chat.completion", "model": req["model"],
                                     "choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant",
                                                              "content": text}}],
                                     "usage": {"prompt_tokens": len(prompt.split()),
                                               "completion_tokens": toks,
                                               "total_tokens": toks}})
                elif self.path == "/generate":
                    prompt = req["text"]
                    assert req["sampling_params"]["temperature"] == 0
                    text = outer.answer(prompt)
                    toks = max(1, len(text.split()))
                    verify = max(1, round(toks / b.accept))
                    with lock:
                        outer.total_tokens += toks
                        outer.total_verify += verify
                    meta: dict[str, Any] = {"id": "r", "prompt_tokens": len(prompt.split()),
                                            "completion_tokens": toks,
                                            "finish_reason": {"type": "stop"}}
                    if b.dialect == "new":
                        meta.update(spec_verify_ct=verify, spec_accept_length=toks / verify,
                                    spec_accept_rate=0.5)
                    elif b.dialect == "old":
                        meta.update(spec_verify_ct=verify)
                    elif b.dialect == "oldest":
                        meta.update(spec_verify_ct=verify, spec_accept_token_num=toks - verify)
                    self._send(200, {"text": text, "meta_info": meta})
                else:
                    self._send(404, {"detail": "Not Found"})

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                        daemon=True)

    def answer(self, prompt: str) -> str:
        if self.behaviour.answer is not None:
            return self.behaviour.answer(prompt)
        return self.default_answer(prompt)

    def default_answer(self, prompt: str) -> str:
        """The reference solution in a fence (what the testbed's model answers)."""
        task = self._by_prompt.get(prompt)
        if task is None:
            return "I can help with that."
        return "Here is a solution.\n\n```python\n" + task.solution + "\n```\n"

    def start(self) -> SglangShapedServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def sgl() -> Iterator[SglangShapedServer]:
    srv = SglangShapedServer().start()
    try:
        yield srv
    finally:
        srv.stop()


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _with_client(url: str, fn: Callable[[ProbeClient], Any]) -> Any:
    async with ProbeClient(url, timeout=10) as c:
        return await fn(c)


@pytest.mark.parametrize("dialect,source", [("new", SRC_SPEC_ACCEPT_LENGTH),
                                            ("old", SRC_VERIFY_CT),
                                            ("oldest", SRC_VERIFY_CT), ("none", "")])
def test_generate_reads_each_meta_info_dialect(sgl: SglangShapedServer, dialect: str,
                                               source: str) -> None:
    sgl.behaviour.dialect = dialect
    sgl.behaviour.accept = 4.0
    task = sgl.suite.tasks[0]
    c = _run(_with_client(sgl.url, lambda cl: cl.generate(task.prompt, max_new_tokens=64)))
    assert task.solution.strip() in c.text
    assert c.accept_source == source
    if source:
        assert c.accept_length == pytest.approx(c.completion_tokens / c.spec_verify_ct)
        assert 3.0 < c.accept_length < 5.0
    else:
        assert c.accept_length is None
    assert c.completion_tokens and c.tok_s and c.tok_s > 0 and c.latency_s > 0
    assert c.finish_reason == "stop"


def test_chat_is_greedy_and_returns_text(sgl: SglangShapedServer) -> None:
    task = sgl.suite.tasks[3]
    c = _run(_with_client(sgl.url, lambda cl: cl.chat(task.prompt, max_tokens=128)))
    assert "```python" in c.text and task.entry_point in c.text
    assert c.completion_tokens == len(c.text.split())
    assert "POST /v1/chat/completions" in sgl.behaviour.requests


@pytest.mark.parametrize("which,paths", [
    ("new", ["GET /server_info"]),
    ("old", ["GET /server_info", "GET /get_server_info"]),
])
def test_server_info_falls_back_to_get_server_info(sgl: SglangShapedServer, which: str,
                                                    paths: list[str]) -> None:
    sgl.behaviour.server_info = which
    _run(_with_client(sgl.url, lambda cl: cl.generate("hello", max_new_tokens=8)))
    info = _run(_with_client(sgl.url, lambda cl: cl.server_info()))
    assert [r for r in sgl.behaviour.requests if r.startswith("GET")] == paths
    assert server_accept_length(info) is not None and server_accept_length(info) > 0


def test_server_info_absent_raises_probe_error(sgl: SglangShapedServer) -> None:
    sgl.behaviour.server_info = "none"
    with pytest.raises(ProbeHTTPError) as e:
        _run(_with_client(sgl.url, lambda cl: cl.server_info()))
    assert e.value.status == 404 and "get_server_info" in str(e.value)


def test_http_500_and_refused_connection_are_probe_errors(sgl: SglangShapedServer) -> None:
    sgl.behaviour.status = 500
    with pytest.raises(ProbeHTTPError) as e:
        _run(_with_client(sgl.url, lambda cl: cl.chat("x")))
    assert e.value.status == 500 and "HTTP 500" in str(e.value)
    url = sgl.url
    sgl.stop()
    with pytest.raises(ProbeHTTPError) as e2:
        _run(_with_client(url, lambda cl: cl.generate("x")))
    assert "request failed" in str(e2.value) and "ConnectError" in str(e2.value)
    sgl.httpd = _Dummy()  # already stopped: make the fixture's stop() a no-op


class _Dummy:
    def shutdown(self) -> None:
        pass

    def server_close(self) -> None:
        pass


def test_timeout_is_a_probe_error(sgl: SglangShapedServer) -> None:
    sgl.behaviour.delay_s = 2.0

    async def go() -> None:
        async with ProbeClient(sgl.url, timeout=0.5) as c:
            await c.chat("x")

    with pytest.raises(ProbeHTTPError, match="timed out"):
        _run(go())


def test_accept_from_meta_pure_cases() -> None:
    assert accept_from_meta({"spec_accept_length": 2.5, "spec_verify_ct": 4}) == (
        2.5, SRC_SPEC_ACCEPT_LENGTH, 4)
    assert accept_from_meta({"completion_tokens": 30, "spec_verify_ct": 10}) == (
        3.0, SRC_VERIFY_CT, 10)
    # a zero spec_accept_length (SGLang's placeholder) falls through to the counts
    assert accept_from_meta({"spec_accept_length": 0, "completion_tokens": 8,
                             "spec_verify_ct": 8}) == (1.0, SRC_VERIFY_CT, 8)
    assert accept_from_meta({"completion_tokens": 30}) == (None, "", None)
    # very old servers: only the accepted-draft count next to the verify count
    assert accept_from_meta({"spec_accept_token_num": 20, "spec_verify_ct": 10}) == (
        3.0, SRC_ACCEPTED_COUNT, 10)
    assert server_accept_length({"internal_states": [{"avg_spec_accept_length": 4.25}]}) == 4.25
    assert server_accept_length({"internal_states": []}) is None
