"""An async HTTP client for an SGLang server: native /generate, OpenAI chat, server info.

Speaks every SGLang dialect ddprobe meets (0.4.x to 0.5.2x): acceptance length comes from
`meta_info.spec_accept_length` when the server computes it, else from
`completion_tokens / spec_verify_ct` (what SGLang's own tests compute), else from the older
`spec_accept_token_num` counts; server-wide acceptance from `/server_info` (newer) or
`/get_server_info` (older), `internal_states[0].avg_spec_accept_length`.
"""
from __future__ import annotations

import json
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

from ddprobe import httpclients
from ddprobe.errors import ServerError
from ddprobe.untrusted import clean, first_chars

ERROR_BODY_READ: Final = 4096  # bytes of an HTTP error body read
ERROR_BODY_CAP: Final = 200  # characters of it an error message quotes

SRC_SPEC_ACCEPT_LENGTH: Final = "spec_accept_length"
SRC_VERIFY_CT: Final = "completion_tokens/spec_verify_ct"
SRC_ACCEPTED_COUNT: Final = "spec_accept_token_num/spec_verify_ct"


# An answer to one probe (max_tokens ~512) is kilobytes; a server that sends more is broken.
# ddprobe reads at most this much of one answer and drops the connection (issue 14: an 8 MB
# answer used to cost 745 MB of RSS, two 400 MB answers OOM-killed ddprobe).
MAX_ANSWER_BYTES: Final = 4 << 20
# json's C decoder recurses per nesting level: `[[[[...` of a few MB is a RecursionError
MAX_JSON_DEPTH: Final = 200


class ProbeHTTPError(ServerError):
    """The server did not answer a probe request properly (refused, timed out, non-2xx, junk)."""

    def __init__(self, url: str, message: str, *, status: int | None = None) -> None:
        self.url, self.status = url, status
        super().__init__(f"{url}: {message}")


class AnswerTooLarge(ProbeHTTPError):
    """The server sent more than the cap for one answer: the answer is garbage (a runaway
    generation, or a hostile server), not an infrastructure problem."""

    def __init__(self, url: str, cap: int) -> None:
        self.cap = cap
        super().__init__(url, f"runaway answer: more than {_size(cap)} (read no further)")


def _size(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def json_depth_ok(data: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when brackets never nest deeper than `limit` (strings skipped; linear time)."""
    depth = 0
    i, n = 0, len(data)
    while i < n:
        c = data[i]
        if c == 0x22:  # '"': skip the string, escapes included
            i += 1
            while i < n and data[i] != 0x22:
                i += 2 if data[i] == 0x5C else 1
        elif c in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return False
        elif c in (0x5D, 0x7D):
            depth -= 1
        i += 1
    return True


@dataclass(frozen=True)
class Completion:
    """One answered request: text, token counts, timing and speculative-decoding metrics."""

    text: str
    latency_s: float
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    accept_length: float | None = None  # per request, including the bonus token
    accept_source: str = ""  # which field it came from (SRC_*), "" when absent
    spec_verify_ct: int | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    output_ids: tuple[int, ...] | None = None  # /generate's token ids, when the server sent them

    @property
    def tok_s(self) -> float | None:
        if not self.completion_tokens or self.latency_s <= 0:
            return None
        return self.completion_tokens / self.latency_s


def accept_from_meta(meta: dict[str, Any]) -> tuple[float | None, str, int | None]:
    """(acceptance length, source, spec_verify_ct) from a /generate meta_info dict."""
    ct = _int(meta.get("spec_verify_ct"))
    val = _num(meta.get("spec_accept_length"))
    if val is not None and val > 0:
        return val, SRC_SPEC_ACCEPT_LENGTH, ct
    toks = _int(meta.get("completion_tokens"))
    if ct and toks:
        return toks / ct, SRC_VERIFY_CT, ct
    accepted = _int(meta.get("spec_accept_token_num"))
    if ct and accepted is not None:
        return (accepted + ct) / ct, SRC_ACCEPTED_COUNT, ct
    return None, "", ct


def server_accept_length(info: dict[str, Any]) -> float | None:
    """`internal_states[0].avg_spec_accept_length` (or the old top-level spelling)."""
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        v = _num(states[0].get("avg_spec_accept_length"))
        if v is not None:
            return v
    return _num(info.get("avg_spec_accept_length"))


class ProbeClient:
    """One connection pool to one server. Use as `async with ProbeClient(url) as c:`."""

    def __init__(self, base_url: str, *, timeout: float = 300.0, model: str = "default",
                 client: httpx.AsyncClient | None = None,
                 max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_answer_bytes = max_answer_bytes
        self._own = client is None
        # no proxies from the environment: the server is on loopback or behind our tunnel
        self._client = client or httpclients.async_client(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
            headers={"Accept-Encoding": "identity"})

    async def __aenter__(self) -> ProbeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own:
            await self._client.aclose()

    async def generate(self, text: str, *, max_new_tokens: int = 512,
                       temperature: float = 0.0) -> Completion:
        """Native `/generate` (greedy by default); reads meta_info for acceptance."""
        body = {"text": text, "sampling_params": {"temperature": temperature,
                                                  "max_new_tokens": max_new_tokens}}
        data, latency = await self._post("/generate", body)
        if isinstance(data, list):  # a batch answer: we sent one prompt
            data = data[0] if data else {}
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            raise ProbeHTTPError(self.base_url + "/generate", "answer has no 'text'")
        meta_info = data.get("meta_info")
        meta: dict[str, Any] = meta_info if isinstance(meta_info, dict) else {}
        acc, src, ct = accept_from_meta(meta)
        fr = meta.get("finish_reason")
        return Completion(text=data["text"], latency_s=latency,
                          completion_tokens=_int(meta.get("completion_tokens")),
                          prompt_tokens=_int(meta.get("prompt_tokens")),
                          finish_reason=fr.get("type") if isinstance(fr, dict) else _str(fr),
                          accept_length=acc, accept_source=src, spec_verify_ct=ct, meta=meta,
                          output_ids=_ids(data.get("output_ids"), max_new_tokens))

    async def chat(self, prompt: str, *, max_tokens: int = 512,
                   system: str | None = None) -> Completion:
        """OpenAI `/v1/chat/completions`, greedy (temperature 0)."""
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt}]
        body = {"model": self.model, "messages": messages, "temperature": 0,
                "max_tokens": max_tokens, "stream": False}
        data, latency = await self._post("/v1/chat/completions", body)
        try:
            choice = data["choices"][0]
            text = choice["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise ProbeHTTPError(self.base_url + "/v1/chat/completions",
                                 "answer has no choices[0].message.content") from None
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        # newer SGLang can attach spec metrics to OpenAI answers (sglext.spec_tokens_details)
        ext = data.get("sglext") if isinstance(data.get("sglext"), dict) else {}
        spec = ext.get("spec_tokens_details") if isinstance(ext, dict) else None
        meta = dict(spec) if isinstance(spec, dict) else {}
        if meta and "completion_tokens" not in meta:
            meta["completion_tokens"] = usage.get("completion_tokens")
        acc, src, ct = accept_from_meta(meta) if meta else (None, "", None)
        return Completion(text=str(text), latency_s=latency,
                          completion_tokens=_int(usage.get("completion_tokens")),
                          prompt_tokens=_int(usage.get("prompt_tokens")),
                          finish_reason=_str(choice.get("finish_reason")),
                          accept_length=acc, accept_source=src, spec_verify_ct=ct, meta=meta)

    async def server_info(self) -> dict[str, Any]:
        """`/server_info`, falling back to `/get_server_info` on versions that lack it."""
        last: ProbeHTTPError | None = None
        for path in ("/server_info", "/get_server_info"):
            try:
                data = await self._get(path)
            except ProbeHTTPError as e:
                if e.status in (404, 405):
                    last = e
                    continue
                raise
            if isinstance(data, dict):
                return data
            last = ProbeHTTPError(self.base_url + path, "answer is not a JSON object")
        assert last is not None
        raise last

    async def _post(self, path: str, body: dict[str, Any]) -> tuple[Any, float]:
        url = self.base_url + path
        t0 = time.perf_counter()
        for attempt in (1, 2):
            try:
                status, raw = await self._request("POST", url, json=body)
                break
            except httpx.TimeoutException:
                raise ProbeHTTPError(url, "timed out") from None
            except (httpx.RemoteProtocolError, httpx.ReadError) as e:
                # a kept-alive connection the server closed under us: greedy requests are
                # idempotent, so one retry on a fresh connection; a dead server fails again
                if attempt == 2:
                    raise ProbeHTTPError(url, f"request failed: {type(e).__name__}: {e}") from None
                t0 = time.perf_counter()
            except httpx.HTTPError as e:
                raise ProbeHTTPError(url, f"request failed: {type(e).__name__}: {e}") from None
        latency = time.perf_counter() - t0
        return self._json(url, status, raw), latency

    async def _get(self, path: str) -> Any:
        url = self.base_url + path
        try:
            status, raw = await self._request("GET", url)
        except httpx.HTTPError as e:
            raise ProbeHTTPError(url, f"request failed: {type(e).__name__}: {e}") from None
        return self._json(url, status, raw)

    async def _request(self, method: str, url: str, **kw: Any) -> tuple[int, bytes]:
        """Status and body, read as a stream up to `max_answer_bytes` (AnswerTooLarge beyond:
        the connection is dropped, the rest never read, whatever Content-Length says)."""
        cap = self.max_answer_bytes
        async with self._client.stream(method, url, **kw) as r:
            declared = r.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > cap and r.status_code < 400:
                raise AnswerTooLarge(url, cap)
            buf = bytearray()
            async for chunk in r.aiter_raw():
                buf += chunk
                if len(buf) > cap:
                    if r.status_code >= 400:
                        break  # an error page: its start is enough for the message
                    raise AnswerTooLarge(url, cap)
            raw = bytes(buf[:cap])
            if r.headers.get("content-encoding", "identity") not in ("identity", ""):
                # we ask for no compression (Accept-Encoding below); a server that compresses
                # anyway could send a small bomb: decode it under the same cap
                raw = _decode_capped(url, r.headers["content-encoding"], raw, cap)
            return r.status_code, raw

    @staticmethod
    def _json(url: str, status: int, raw: bytes) -> Any:
        if status >= 400:
            text = raw[:ERROR_BODY_READ].decode("utf-8", "replace")
            snippet = first_chars(" ".join(clean(text).split()), ERROR_BODY_CAP)
            raise ProbeHTTPError(url, f"HTTP {status}: {snippet}", status=status)
        if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and not json_depth_ok(raw):
            raise ProbeHTTPError(url, f"answer is not usable JSON (nested deeper than "
                                 f"{MAX_JSON_DEPTH} levels)", status=status)
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise ProbeHTTPError(url, "answer is not JSON", status=status) from None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _decode_capped(url: str, encoding: str, raw: bytes, cap: int) -> bytes:
    """gzip/deflate decoded with an output cap (a 4 MiB bomb expands to gigabytes)."""
    enc = encoding.strip().lower()
    if enc not in ("gzip", "deflate", "x-gzip"):
        raise ProbeHTTPError(url, f"answer has an unsupported Content-Encoding {clean(enc)!r}")
    d = zlib.decompressobj(wbits=47)  # gzip or zlib header, detected
    try:
        out = d.decompress(raw, cap + 1)
    except zlib.error:
        raise ProbeHTTPError(url, "answer is not valid compressed data") from None
    if len(out) > cap:
        raise AnswerTooLarge(url, cap)
    return out


def _ids(v: Any, cap: int) -> tuple[int, ...] | None:
    """Token ids from an answer (untrusted): a list of ints, at most `cap` of them kept."""
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                          for x in v[:cap]):
        return None
    return tuple(v[:cap])
