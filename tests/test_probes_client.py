"""The probe client against a real HTTP server on loopback that answers like SGLang.

`SglangShapedServer` is a real threaded HTTP server (no mocks): it answers /generate,
/v1/chat/completions, /server_info or /get_server_info with the JSON shapes of the SGLang
versions ddprobe supports (meta_info field names from the 0.4.10-0.5.23 wheels'
tokenizer_manager.py), using the coding suite's reference solutions as the model's answers.
The server lives in tests/probes_util.py; the `sgl` fixture in conftest.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from probes_util import SglangShapedServer

from ddprobe.probes.client import (
    SRC_ACCEPTED_COUNT,
    SRC_SPEC_ACCEPT_LENGTH,
    SRC_VERIFY_CT,
    ProbeClient,
    ProbeHTTPError,
    accept_from_meta,
    server_accept_length,
)


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
