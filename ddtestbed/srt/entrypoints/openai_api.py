"""OpenAI-compatible /v1/chat/completions and /v1/completions, shaped like SGLang's serving_*."""
from __future__ import annotations

import time
from typing import Any

from ...tokenizer import apply_chat_template

FINISH_TYPES = {"stop": "stop", "length": "length", "abort": "abort"}


def chat_prompt(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ValueError("messages must be a non-empty list of objects.")
    return apply_chat_template(messages)


def completion_prompt(body: dict[str, Any]) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise ValueError("prompt must be a string.")
    return prompt


def sampling_params(body: dict[str, Any], *, chat: bool, room: int) -> dict[str, Any]:
    if body.get("n", 1) not in (1, None):
        raise ValueError("n > 1 is not supported by this server.")
    max_tokens = body.get("max_completion_tokens") if chat else None
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    if max_tokens is None:
        max_tokens = room if chat else 16  # OpenAI's completions default
    params: dict[str, Any] = {
        "max_new_tokens": max_tokens,
        "temperature": 1.0 if body.get("temperature") is None else body["temperature"],
        "stop": body.get("stop"),
        "ignore_eos": bool(body.get("ignore_eos", False)),
    }
    if body.get("seed") is not None:
        params["sampling_seed"] = body["seed"]
    return params


def _finish(meta: dict[str, Any]) -> tuple[str | None, Any]:
    reason = meta.get("finish_reason")
    if not reason:
        return None, None
    return FINISH_TYPES.get(reason.get("type"), "stop"), reason.get("matched")


def _usage(meta: dict[str, Any]) -> dict[str, Any]:
    prompt, completion = meta["prompt_tokens"], meta["completion_tokens"]
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion,
            "completion_tokens": completion, "prompt_tokens_details": None,
            "reasoning_tokens": 0}


def chat_response(out: dict[str, Any], model: str) -> dict[str, Any]:
    meta = out["meta_info"]
    finish, matched = _finish(meta)
    return {
        "id": meta["id"], "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": out["text"], "reasoning_content": None,
                        "tool_calls": None},
            "logprobs": None, "finish_reason": finish, "matched_stop": matched,
        }],
        "usage": _usage(meta), "metadata": {"weight_version": "default"},
    }


def completion_response(out: dict[str, Any], model: str) -> dict[str, Any]:
    meta = out["meta_info"]
    finish, matched = _finish(meta)
    return {
        "id": meta["id"], "object": "text_completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "text": out["text"], "logprobs": None, "finish_reason": finish,
                     "matched_stop": matched}],
        "usage": _usage(meta), "metadata": {"weight_version": "default"},
    }


def chat_chunk(rid: str, model: str, delta: dict[str, Any], finish: str | None = None,
               matched: Any = None) -> dict[str, Any]:
    return {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                         "finish_reason": finish, "matched_stop": matched}],
            "usage": None}


def completion_chunk(rid: str, model: str, text: str, finish: str | None = None,
                     matched: Any = None) -> dict[str, Any]:
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                         "matched_stop": matched}], "usage": None}


def usage_chunk(rid: str, model: str, meta: dict[str, Any], *, chat: bool) -> dict[str, Any]:
    return {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": [], "usage": _usage(meta)}


def finish_of(out: dict[str, Any]) -> tuple[str | None, Any]:
    return _finish(out["meta_info"])
