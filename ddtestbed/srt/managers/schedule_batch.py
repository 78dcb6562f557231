"""A request as the scheduler sees it."""
from __future__ import annotations

import queue
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

from ...tokenizer import EOS_TOKEN_IDS, SPECIAL_TOKENS, Tokenizer


@dataclass
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    seed: int = 0


@dataclass
class Req:
    rid: str
    origin_input_ids: list[int]
    sampling: SamplingParams
    tokenizer: Tokenizer
    output_ids: list[int] = field(default_factory=list)
    kv_locs: array = field(default_factory=lambda: array("q"))
    req_pool_idx: int = -1
    finished_reason: dict[str, Any] | None = None
    stop_str_at: int | None = None  # where a matched stop string starts in the output text
    spec_verify_ct: int = 0
    spec_accepted_tokens: int = 0
    spec_acceptance_histogram: list[int] = field(default_factory=list)
    created: float = field(default_factory=time.perf_counter)
    finished_at: float = 0.0
    health_check: bool = False
    # scheduler -> HTTP thread: ("update" | "finish", number of output tokens at that moment)
    events: queue.Queue = field(default_factory=queue.Queue)

    @property
    def committed(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

    @property
    def finished(self) -> bool:
        return self.finished_reason is not None

    def append_tokens(self, tokens: list[int], context_len: int, margin: int) -> int:
        """Append tokens one by one until the request finishes; returns how many were kept."""
        kept = 0
        for tok in tokens:
            self.output_ids.append(tok)
            kept += 1
            self._check_finished(tok, context_len, margin)
            if self.finished:
                break
        return kept

    def _check_finished(self, tok: int, context_len: int, margin: int) -> None:
        sp = self.sampling
        if not sp.ignore_eos and tok in EOS_TOKEN_IDS or tok in sp.stop_token_ids:
            self.finished_reason = {"type": "stop", "matched": tok}
        elif len(self.output_ids) >= sp.max_new_tokens:
            self.finished_reason = {"type": "length", "length": sp.max_new_tokens}
        elif len(self.origin_input_ids) + len(self.output_ids) + margin >= context_len:
            self.finished_reason = {"type": "length", "length": len(self.output_ids)}
        elif sp.stop:
            text = self.output_text(trim=False)
            tail_from = max(0, len(text) - max(len(s) for s in sp.stop) - 64)
            for s in sp.stop:
                at = text.find(s, tail_from)
                if at >= 0:
                    self.finished_reason = {"type": "stop", "matched": s}
                    self.stop_str_at = at
                    break

    def output_text(self, trim: bool = True, upto: int | None = None) -> str:
        ids = self.output_ids if upto is None else self.output_ids[:upto]
        text = self.tokenizer.decode(t for t in ids if t >= len(SPECIAL_TOKENS))
        if trim and self.stop_str_at is not None:
            text = text[:self.stop_str_at]
        return text

    def update_spec_acceptance_histogram(self, accepted_draft_tokens: int) -> None:
        hist = self.spec_acceptance_histogram
        if len(hist) <= accepted_draft_tokens:
            hist.extend([0] * (accepted_draft_tokens - len(hist) + 1))
        hist[accepted_draft_tokens] += 1
