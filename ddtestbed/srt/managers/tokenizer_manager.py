"""TokenizerManager: turns native /generate requests into scheduler requests and back.

Response shapes follow SGLang 0.5.10's `tokenizer_manager.py`: `{"text", "output_ids",
"meta_info"}` with meta_info keys id, finish_reason, prompt_tokens, weight_version,
total_retractions, reasoning_tokens, completion_tokens, cached_tokens, e2e_latency and, with
speculative decoding, spec_accept_rate, spec_accept_length, spec_accept_token_num,
spec_draft_token_num, spec_verify_ct, spec_accept_histogram.
"""
from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

from ...tokenizer import Tokenizer
from ..server_args import ServerArgs
from .schedule_batch import Req, SamplingParams
from .scheduler import Scheduler

DEFAULT_MAX_NEW_TOKENS = 128


class TokenizerManager:
    def __init__(self, server_args: ServerArgs, tokenizer: Tokenizer,
                 scheduler: Scheduler) -> None:
        self.server_args, self.tokenizer, self.scheduler = server_args, tokenizer, scheduler
        self.server_status = "Starting"
        self.context_len = scheduler.model_runner.model_config.context_len

    # -- requests -----------------------------------------------------------------------------
    def make_req(self, text: str | None, input_ids: list[int] | None,
                 sampling_params: dict[str, Any], rid: str | None = None,
                 health_check: bool = False) -> Req:
        if input_ids is None:
            if not isinstance(text, str):
                raise ValueError("Either text or input_ids should be provided.")
            input_ids = self.tokenizer.encode(text)
        if not isinstance(input_ids, list) or not all(isinstance(i, int) for i in input_ids):
            raise ValueError("input_ids must be a list of integers.")
        if not input_ids:
            raise ValueError("The input is empty.")
        if len(input_ids) >= self.context_len:
            raise ValueError(
                f"The input ({len(input_ids)} tokens) is longer than the model's context length "
                f"({self.context_len} tokens).")
        return Req(rid=rid or uuid.uuid4().hex, origin_input_ids=list(input_ids),
                   sampling=parse_sampling_params(sampling_params), tokenizer=self.tokenizer,
                   health_check=health_check)

    def generate(self, req: Req, stream: bool) -> Iterator[dict[str, Any]]:
        """Submit now; the iterator yields every update when streaming, else only the final one."""
        if req.sampling.max_new_tokens <= 0:
            req.finished_reason = {"type": "length", "length": 0}
            return iter([self.build_output(req)])
        self.scheduler.add_request(req)
        return self._outputs(req, stream)

    def _outputs(self, req: Req, stream: bool) -> Iterator[dict[str, Any]]:
        while True:
            event, count = req.events.get()
            if event == "finish":
                yield self.build_output(req)
                return
            if stream:
                yield self.build_output(req, upto=count)

    def build_output(self, req: Req, upto: int | None = None) -> dict[str, Any]:
        """The response for `req`: final, or (with `upto`) a snapshot of its first tokens."""
        done = upto is None and (req.finished_at > 0 or req.sampling.max_new_tokens <= 0)
        output_ids = req.output_ids if upto is None else req.output_ids[:upto]
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": req.finished_reason if done else None,
            "prompt_tokens": len(req.origin_input_ids),
            "weight_version": "default",
            "total_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": len(output_ids),
            "cached_tokens": 0,
        }
        if done:
            meta["e2e_latency"] = max(0.0, (req.finished_at or req.created) - req.created)
            if self.server_args.speculative_algorithm:
                self._calculate_spec_decoding_metrics(meta, req)
        text = req.output_text(upto=upto)
        return {"text": text, "output_ids": list(output_ids), "meta_info": meta}

    def _calculate_spec_decoding_metrics(self, meta: dict[str, Any], req: Req) -> None:
        if req.spec_verify_ct <= 0:
            return
        num_guess_tokens = (self.server_args.speculative_num_draft_tokens or 1) - 1
        total_draft_tokens = req.spec_verify_ct * num_guess_tokens
        if total_draft_tokens > 0:
            meta["spec_accept_rate"] = req.spec_accepted_tokens / total_draft_tokens
            meta["spec_accept_length"] = len(req.output_ids) / req.spec_verify_ct
            meta["spec_accept_token_num"] = req.spec_accepted_tokens
            meta["spec_draft_token_num"] = total_draft_tokens
            meta["spec_verify_ct"] = req.spec_verify_ct
        if req.spec_acceptance_histogram:
            meta["spec_accept_histogram"] = list(req.spec_acceptance_histogram)


def parse_sampling_params(params: dict[str, Any] | None) -> SamplingParams:
    params = params or {}
    if not isinstance(params, dict):
        raise ValueError("sampling_params must be an object.")

    def number(key: str, default: float, kind: type) -> Any:
        value = params.get(key, default)
        if value is None:
            value = default
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or kind is int and not isinstance(value, int):
            raise ValueError(f"sampling_params.{key} must be {kind.__name__}, got {value!r}")
        return kind(value)

    max_new_tokens = number("max_new_tokens", DEFAULT_MAX_NEW_TOKENS, int)
    temperature = number("temperature", 1.0, float)
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be at least 0, got {max_new_tokens}.")
    if temperature < 0:
        raise ValueError(f"temperature must be non-negative, got {temperature}.")
    stop = params.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) and s for s in stop):
        raise ValueError("stop must be a non-empty string or a list of them.")
    stop_ids = params.get("stop_token_ids") or ()
    if not isinstance(stop_ids, (list, tuple)) or not all(isinstance(i, int) for i in stop_ids):
        raise ValueError("stop_token_ids must be a list of integers.")
    seed = params.get("sampling_seed")
    if seed is None:
        seed = random.getrandbits(32)
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature,
                          stop=tuple(stop), stop_token_ids=tuple(stop_ids),
                          ignore_eos=bool(params.get("ignore_eos", False)), seed=int(seed))
