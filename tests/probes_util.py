"""`SglangShapedServer`: a real threaded HTTP server on loopback (no mocks) that answers
/generate, /v1/chat/completions, /server_info or /get_server_info with the JSON shapes of the
SGLang versions ddprobe supports (meta_info field names from the 0.4.10-0.5.23 wheels'
tokenizer_manager.py), using the coding suite's reference solutions as the model's answers.
The probe tests get one through conftest's `sgl` fixture; test_probes_client checks it."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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

            def do_GET(self) -> None:
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

            def do_POST(self) -> None:
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
