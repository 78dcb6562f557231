"""The HTTP server: SGLang's native and OpenAI-compatible endpoints on the stdlib's HTTP server."""
from __future__ import annotations

import dataclasses
import json
import logging
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ...version import __version__
from ..managers.schedule_batch import Req
from ..metrics import render_metrics
from ..utils import die_like_sglang
from . import openai_api
from .engine import Engine

logger = logging.getLogger(__name__)
HEALTH_CHECK_TIMEOUT = 20.0
WARMUP_INPUT_IDS = [10, 11, 12]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # listen backlog; uvicorn's is 2048 (the default 5 drops bursts)
    engine: Engine

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-response is not a server error; uvicorn logs no traceback.
        exc = sys.exc_info()[1]
        if isinstance(exc, (BrokenPipeError, ConnectionResetError)):
            logger.debug(f"client {client_address} disconnected: {exc}")
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    # uvicorn's access-log line, through the server's logger
    def log_message(self, format: str, *args: Any) -> None:
        return None

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        try:
            phrase = HTTPStatus(int(code)).phrase
        except ValueError:
            phrase = ""
        host, port = self.client_address[:2]
        logger.info(f'INFO:     {host}:{port} - "{self.requestline}" {code} {phrase}')

    # -- plumbing -------------------------------------------------------------------------
    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, obj: Any, status: int = 200) -> None:
        self._send(status, json.dumps(obj).encode())

    def _error(self, message: str, status: int = 400) -> None:
        self._json({"error": {"message": message}}, status)

    def _stream(self, chunks: Iterator[dict[str, Any]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for obj in chunks:
            self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _body(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as e:
            self._json({"detail": [{"type": "json_invalid", "msg": f"JSON decode error: {e}"}]}, 422)
            return None
        if not isinstance(body, dict):
            self._json({"detail": [{"type": "model_attributes_type",
                                    "msg": "Input should be a valid dictionary"}]}, 422)
            return None
        return body

    @property
    def engine(self) -> Engine:
        return self.server.engine

    # -- routing --------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        handler = _ROUTES.get(path)
        if handler is None:
            self._json({"detail": "Not Found"}, 404)
            return
        methods, fn = handler
        if method not in methods:
            self._json({"detail": "Method Not Allowed"}, 405)
            return
        fn(self)

    # -- native endpoints -----------------------------------------------------------------
    def health(self) -> None:
        tm = self.engine.tokenizer_manager
        if tm.server_status == "Starting":
            self._send(503, b"", "text/plain")
            return
        req = tm.make_req(None, [0], {"max_new_tokens": 1, "temperature": 0.0},
                          rid=f"HEALTH_CHECK_{time.time()}", health_check=True)
        self.engine.scheduler.add_request(req)
        try:
            req.events.get(timeout=HEALTH_CHECK_TIMEOUT)
        except Exception:
            logger.error(f"Health check failed. Server couldn't get a response from detokenizer "
                         f"for last {HEALTH_CHECK_TIMEOUT:g} seconds.")
            self._send(503, b"", "text/plain")
            return
        self._send(200, b"", "text/plain")

    def server_info(self) -> None:
        e = self.engine
        runner = e.scheduler.model_runner
        self._json({
            **dataclasses.asdict(e.server_args),
            "max_total_num_tokens": runner.max_total_num_tokens,
            "max_req_input_len": runner.model_config.context_len - 1,
            "internal_states": [e.scheduler.get_internal_state()],
            "version": e.scenario.server.reported_version or __version__,
        })

    def model_info(self) -> None:
        e = self.engine
        cfg = e.scheduler.model_runner.model_config
        self._json({
            "model_path": e.server_args.model_path, "tokenizer_path": e.server_args.tokenizer_path,
            "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
            "has_image_understanding": False, "has_audio_understanding": False,
            "model_type": cfg.model_type, "architectures": list(cfg.architectures),
        })

    def models(self) -> None:
        e = self.engine
        name = e.server_args.served_model_name or e.server_args.model_path
        self._json({"object": "list", "data": [{
            "id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang",
            "root": name, "parent": None,
            "max_model_len": e.scheduler.model_runner.model_config.context_len}]})

    def metrics(self) -> None:
        e = self.engine
        if not e.server_args.enable_metrics:
            self._json({"detail": "Not Found"}, 404)
            return
        stats = dict(e.scheduler.stats)
        stats["max_total_num_tokens"] = e.scheduler.model_runner.max_total_num_tokens
        labels = {"model_name": e.server_args.served_model_name or e.server_args.model_path,
                  "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
        self._send(200, render_metrics(stats, labels).encode(),
                   "text/plain; version=0.0.4; charset=utf-8")

    def flush_cache(self) -> None:
        if self.command == "POST":
            self._body_discard()
        if not self.engine.scheduler.is_idle():
            self._send(400, b"Flush cache failed.\n", "text/plain")
            return
        logger.info("Cache flushed successfully!")
        self._send(200, b"Cache flushed.\nPlease check backend logs for more details. (When there "
                        b"are running or waiting requests, the operation will not be performed.)\n",
                   "text/plain")

    def _body_discard(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)

    def generate(self) -> None:
        body = self._body()
        if body is None:
            return
        tm = self.engine.tokenizer_manager
        text, input_ids = body.get("text"), body.get("input_ids")
        batch = isinstance(text, list) or (isinstance(input_ids, list) and input_ids
                                           and isinstance(input_ids[0], list))
        try:
            if batch:
                items = input_ids if input_ids is not None else text
                reqs = [tm.make_req(None if input_ids is not None else t,
                                    t if input_ids is not None else None,
                                    body.get("sampling_params") or {}) for t in items]
            else:
                reqs = [tm.make_req(text, input_ids, body.get("sampling_params") or {},
                                    rid=body.get("rid"))]
        except ValueError as e:
            logger.error(f"[http_server] Error: {e}")
            self._error(str(e))
            return
        if body.get("stream") and not batch:
            self._stream(tm.generate(reqs[0], stream=True))
            return
        outs = _gather(tm, reqs)
        self._json(outs if batch else outs[0])

    # -- OpenAI-compatible ----------------------------------------------------------------
    def openai(self, chat: bool) -> None:
        body = self._body()
        if body is None:
            return
        e = self.engine
        tm = e.tokenizer_manager
        model = e.server_args.served_model_name or e.server_args.model_path
        try:
            prompt = openai_api.chat_prompt(body) if chat else openai_api.completion_prompt(body)
            ids = e.tokenizer.encode(prompt)
            params = openai_api.sampling_params(body, chat=chat, room=tm.context_len - len(ids) - 1)
            req = tm.make_req(None, ids, params)
        except ValueError as err:
            self._json({"object": "error", "message": str(err), "type": "BadRequest",
                        "param": None, "code": 400}, 400)
            return
        if body.get("stream"):
            opts = body.get("stream_options") or {}
            self._stream(_openai_chunks(tm.generate(req, stream=True), req, model, chat,
                                        bool(opts.get("include_usage"))))
            return
        out = next(iter(tm.generate(req, stream=False)))
        self._json(openai_api.chat_response(out, model) if chat
                   else openai_api.completion_response(out, model))


def _gather(tm: Any, reqs: list[Req]) -> list[dict[str, Any]]:
    gens = [tm.generate(r, stream=False) for r in reqs]
    return [next(iter(g)) for g in gens]


def _openai_chunks(outs: Iterator[dict[str, Any]], req: Req, model: str, chat: bool,
                   include_usage: bool) -> Iterator[dict[str, Any]]:
    sent = ""
    if chat:
        yield openai_api.chat_chunk(req.rid, model, {"role": "assistant", "content": ""})
    last: dict[str, Any] | None = None
    for out in outs:
        last = out
        finish, matched = openai_api.finish_of(out)
        delta, sent = out["text"][len(sent):], out["text"]
        if delta or finish:
            yield (openai_api.chat_chunk(req.rid, model, {"content": delta} if delta else {},
                                         finish, matched) if chat
                   else openai_api.completion_chunk(req.rid, model, delta, finish, matched))
    if include_usage and last is not None:
        yield openai_api.usage_chunk(req.rid, model, last["meta_info"], chat=chat)


_ROUTES: dict[str, tuple[tuple[str, ...], Any]] = {
    "/health": (("GET",), _Handler.health),
    "/health_generate": (("GET",), _Handler.health),
    "/get_server_info": (("GET",), _Handler.server_info),
    "/server_info": (("GET",), _Handler.server_info),
    "/get_model_info": (("GET",), _Handler.model_info),
    "/model_info": (("GET",), _Handler.model_info),
    "/v1/models": (("GET",), _Handler.models),
    "/metrics": (("GET",), _Handler.metrics),
    "/flush_cache": (("GET", "POST"), _Handler.flush_cache),
    "/generate": (("POST", "PUT"), _Handler.generate),
    "/v1/chat/completions": (("POST",), lambda h: h.openai(chat=True)),
    "/v1/completions": (("POST",), lambda h: h.openai(chat=False)),
}


def serve(engine: Engine) -> None:
    """Bind, warm up in the background, then serve until killed."""
    args = engine.server_args
    try:
        httpd = _Server((args.host, args.port), _Handler)
    except OSError as e:
        logger.error(f"[Errno {e.errno}] error while attempting to bind on address "
                     f"('{args.host}', {args.port}): {e.strerror}")
        raise SystemExit(1) from None
    httpd.engine = engine
    logger.info(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    threading.Thread(target=_warmup, args=(engine,), name="warmup", daemon=True).start()
    try:
        httpd.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()


def _warmup(engine: Engine) -> None:
    args = engine.server_args
    if not args.skip_server_warmup:
        # One prefill-only request, like a health check: it proves the pipeline end to end.
        body = json.dumps({"input_ids": WARMUP_INPUT_IDS,
                           "sampling_params": {"temperature": 0, "max_new_tokens": 1}}).encode()
        request = urllib.request.Request(args.url() + "/generate", data=body,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request) as res:
                res.read()
        except Exception as e:  # the server cannot serve: die like SGLang's warmup does
            logger.error(f"Initialization failed. warmup error: {e}")
            die_like_sglang(logger)
            return
    engine.tokenizer_manager.server_status = "Up"
    logger.info("The server is fired up and ready to roll!")
