"""A stand-in server that replays a real log excerpt (tests/data/logs/*.log), for real cells.

    python logreplay.py --log FILE --mode MODE [--split N] [--linger S] [--answers SUITE] ...

It prints the excerpt to stdout (the cell's server log) the way the server it came from did,
then behaves as that server did; it never decides an outcome, it only acts one out:

  exit             print everything, stay `--linger` seconds, exit 1 (a start-up failure)
  hang             print everything, never listen (a start-up that never gets ready)
  serve            print lines before `--split`, listen and answer correctly (the suite's
                   reference solutions); print the rest after the first request (healthy)
  serve-then-exit  like serve until the first request; then print the rest (the failure),
                   leave the HTTP front up `--linger` seconds with requests stuck and
                   /health_generate failing (SGLang's scheduler dead, its front alive), exit 1
  serve-then-hang  like serve-then-exit, but the process and its front stay up forever

Only the stdlib, so it runs under any interpreter a test host has. Unknown flags (the launch
flags ddprobe appends) are ignored, except --port and --host.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _excerpt(path: str) -> list[str]:
    """The log lines of a corpus file (its `# key: value` header lines are not log)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    i = 0
    while i < len(lines) and lines[i].startswith("# ") and ":" in lines[i]:
        i += 1
    return lines[i:]


def _emit(lines: list[str]) -> None:
    for ln in lines:
        sys.stdout.write(ln + "\n")
    sys.stdout.flush()


class _State:
    def __init__(self, rest: list[str], mode: str, linger: float,
                 answers: dict[str, str]) -> None:
        self.rest, self.mode, self.linger, self.answers = rest, mode, linger, answers
        self.failed = threading.Event()
        self.lock = threading.Lock()
        self.started = False

    def first_request(self) -> None:
        # under the lock: a request arriving beside the first one (chat and /generate go
        # together) waits until the failure is printed and then sees it, never an answer
        with self.lock:
            if self.started:
                return
            self.started = True
            if self.mode in ("serve-then-exit", "serve-then-hang"):
                self.failed.set()
            _emit(self.rest)
        if self.mode == "serve-then-exit":
            threading.Thread(target=self._exit_later, daemon=True).start()

    def _exit_later(self) -> None:
        time.sleep(max(0.0, self.linger))
        sys.stdout.flush()
        import os
        os._exit(1)


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: Any) -> None:
            return None

        def _send(self, code: int, obj: Any) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _stuck(self) -> None:
            while True:  # the scheduler is gone: nothing ever answers
                time.sleep(3600)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, {})
            elif self.path == "/health_generate":
                if state.failed.is_set():
                    time.sleep(0.5)
                    self._send(503, {"error": "health check failed"})
                else:
                    self._send(200, {})
            elif self.path in ("/server_info", "/get_server_info"):
                self._send(200, {"version": "replay", "internal_states": [{}]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n) or b"{}")
            state.first_request()
            if state.failed.is_set():
                self._stuck()
            if self.path == "/generate":
                self._send(200, {"text": self._answer(body.get("text", "")),
                                 "meta_info": {"completion_tokens": 16, "prompt_tokens": 8}})
            elif self.path == "/v1/chat/completions":
                msgs = body.get("messages") or [{}]
                text = self._answer(str(msgs[-1].get("content", "")))
                self._send(200, {"choices": [{"message": {"content": text},
                                              "finish_reason": "stop"}],
                                 "usage": {"completion_tokens": 16, "prompt_tokens": 8}})
            else:
                self._send(404, {"error": "not found"})

        def _answer(self, prompt: str) -> str:
            sol = state.answers.get(prompt.strip())
            return f"```python\n{sol}\n```" if sol else "I cannot help with that."

    return H


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--log", required=True)
    ap.add_argument("--mode", required=True, choices=("exit", "hang", "serve",
                                                      "serve-then-exit", "serve-then-hang"))
    ap.add_argument("--split", type=int, default=0)
    ap.add_argument("--linger", type=float, default=0.0)
    ap.add_argument("--answers", default="")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--host", default="127.0.0.1")
    args, _ = ap.parse_known_args(argv)
    lines = _excerpt(args.log)
    if args.mode in ("exit", "hang"):
        _emit(lines)
        if args.mode == "exit":
            time.sleep(max(0.0, args.linger))
            return 1
        while True:
            time.sleep(3600)
    answers: dict[str, str] = {}
    if args.answers:
        with open(args.answers, encoding="utf-8") as fh:
            suite = json.load(fh)
        answers = {t["prompt"].strip(): t["solution"] for t in suite["tasks"]}
    _emit(lines[: args.split])
    state = _State(lines[args.split:], args.mode, args.linger, answers)
    srv = ThreadingHTTPServer((args.host, args.port), _handler(state))
    srv.daemon_threads = True
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
