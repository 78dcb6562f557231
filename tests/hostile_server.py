"""A hostile SGLang-shaped HTTP server (tests and benchmarks/hostile.py; stdlib only).

    python tests/hostile_server.py --port P --mode MODE [--answer-file F] [--size BYTES]

It speaks just enough of SGLang (`/health`, `/health_generate`, `/generate`,
`/v1/chat/completions`, `/server_info`, `/get_server_info`) for ddprobe's probes, and answers
every completion request according to MODE:

  answer     a well-formed answer whose text is the content of --answer-file (model code that
             attacks the sandbox, terminal escapes, markup, XML-illegal bytes, ...)
  huge       a JSON answer of --size bytes (default 1 GiB) with an honest Content-Length,
             streamed from one reused chunk (the server itself stays small)
  chunked    the same without Content-Length (chunked transfer encoding): no early refusal
  deep       `[` nested --size deep (default 5,000,000): a RecursionError for naive json
  gzip       `Content-Encoding: gzip` of --size zero bytes, though identity was asked for
  slowloris  a valid head, then one byte a second forever
  error      HTTP 500 whose body is the content of --answer-file (host text in an error)

It prints `ready <port>` on stdout once listening.
"""
from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import subprocess
import sys

CHUNK = 1 << 20


def _answer_json(text: str) -> bytes:
    return json.dumps({
        "id": "x", "object": "chat.completion", "model": "default",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 50, "total_tokens": 60},
        "text": text,
        "meta_info": {"completion_tokens": 50, "spec_verify_ct": 10, "finish_reason":
                      {"type": "stop"}}}).encode()


class Hostile:
    def __init__(self, mode: str, size: int, answer: str) -> None:
        self.mode, self.size, self.answer = mode, size, answer

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                hdrs = {k.lower(): v.strip() for k, _, v in
                        (ln.partition(":") for ln in lines[1:] if ln)}
                n = int(hdrs.get("content-length", "0") or 0)
                if n:
                    await reader.readexactly(n)
                await self.route(method, path, writer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def send(self, writer: asyncio.StreamWriter, body: bytes, *,
                   ctype: str = "application/json", extra: str = "") -> None:
        writer.write((f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: "
                      f"{len(body)}\r\n{extra}\r\n").encode() + body)

    async def route(self, method: str, path: str, writer: asyncio.StreamWriter) -> None:
        if path in ("/health", "/health_generate"):
            return await self.send(writer, b"", ctype="text/plain")
        if path in ("/server_info", "/get_server_info"):
            return await self.send(writer, json.dumps(
                {"internal_states": [{"avg_spec_accept_length": 3.0}],
                 "version": self.answer[:200] if self.mode == "answer" else "0.5.10"}).encode())
        if path not in ("/generate", "/v1/chat/completions"):
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return None
        m = self.mode
        if m == "answer":
            return await self.send(writer, _answer_json(self.answer))
        if m == "error":
            body = self.answer.encode("utf-8", "surrogateescape")
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            return None
        if m in ("huge", "chunked"):
            prefix = b'{"choices":[{"message":{"content":"'
            body_len = self.size
            length = f"Content-Length: {body_len}\r\n" if m == "huge" else \
                "Transfer-Encoding: chunked\r\n"
            writer.write(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{length}\r\n"
                         .encode())
            chunk = b"A" * CHUNK
            sent = 0
            first = True
            while sent < body_len:
                piece = prefix + chunk[len(prefix):] if first else chunk
                piece = piece[:body_len - sent]
                first = False
                writer.write(piece if m == "huge" else b"%x\r\n%s\r\n" % (len(piece), piece))
                sent += len(piece)
                await writer.drain()
            if m == "chunked":
                writer.write(b"0\r\n\r\n")
            return None
        if m == "deep":
            return await self.send(writer, b"[" * self.size + b"]" * self.size)
        if m == "gzip":
            body = gzip.compress(b"\0" * self.size, compresslevel=9)
            return await self.send(writer, body, extra="Content-Encoding: gzip\r\n")
        if m == "slowloris":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100000\r\n\r\n")
            while True:
                writer.write(b" ")
                await writer.drain()
                await asyncio.sleep(1.0)
        raise ValueError(m)


async def serve(port: int, h: Hostile) -> None:
    server = await asyncio.start_server(h.handle, "127.0.0.1", port)
    actual = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"ready {actual}\n")
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--mode", default="answer")
    ap.add_argument("--size", type=int, default=None)
    ap.add_argument("--answer-file")
    a = ap.parse_args()
    answer = open(a.answer_file, encoding="utf-8", errors="surrogateescape").read() \
        if a.answer_file else "def f():\n    return 1\n"
    size = a.size if a.size is not None else (5_000_000 if a.mode == "deep" else 1 << 30)
    asyncio.run(serve(a.port, Hostile(a.mode, size, answer)))


if __name__ == "__main__":
    main()


def start(mode: str, *, size: int | None = None, answer: str | None = None,
          tmp: str | None = None) -> tuple[subprocess.Popen[str], str]:
    """Start the server as its own process; (process, base URL). Stop it with `stop`."""
    import os
    import tempfile
    argv = [sys.executable, os.path.abspath(__file__), "--mode", mode]
    if size is not None:
        argv += ["--size", str(size)]
    if answer is not None:
        fd, path = tempfile.mkstemp(prefix="hostile-answer-", dir=tmp)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(answer)
        argv += ["--answer-file", path]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if not line or line[0] != "ready":
        proc.kill()
        raise RuntimeError(f"hostile server did not start: {line}")
    return proc, f"http://127.0.0.1:{line[1]}"


def stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(timeout=10)
