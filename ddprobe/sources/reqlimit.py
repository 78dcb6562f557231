"""The longest sequence a release lets a request reach, read from its own limits (pure).

A buffer laid out per request as `draft * (seq_len + draft)` is only short if some request
reaches a seq_len where that exceeds the allocation. SGLang never lets one reach context_len:
  srt/managers/tp_worker.py   max_req_len = min(context_len - 1, max_total_num_tokens - 1)
  srt/managers/scheduler.py   max_new_tokens = min(asked, max_req_len - input_len - 1)
so a request holds at most input_len + max_new_tokens <= max_req_len - 1 tokens, and the prefix a
verify pass sees (seq_lens) is at most that: context_len - 2 in every release read so far
(0.4.10.post2 to 0.5.23). The KV pool (max_total_num_tokens) can only lower it; it is not known
from the source, so the bound is the context's. An install without these lines (the testbed, a
fork) keeps seq_len = context_len, and says it is assumed.

    lim = seq_limit(texts)      # SeqLimit(below=2, text="...", assumed=False)
    lim.seq_len(4096)           # 4094
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

TP_WORKER = "srt/managers/tp_worker.py"
SCHEDULER = "srt/managers/scheduler.py"
LIMIT_FILES = (TP_WORKER, SCHEDULER)

_MAX_REQ = re.compile(r"max_req_len\s*=\s*min\(\s*(?:self\.)?model_config\.context_len\s*-\s*"
                      r"(\d+)")
_NEW_CAP = re.compile(r"max_req_len\s*-\s*(?:len\(\s*req\.origin_input_ids\s*\)|input_len)\s*"
                      r"-\s*(\d+)")


@dataclass(frozen=True)
class SeqLimit:
    below: int  # the longest reachable seq_len is context_len - below
    text: str  # which limits, and where (file:line)
    assumed: bool = False  # the install states no limit: context_len itself

    def seq_len(self, context_len: int) -> int:
        return context_len - self.below

    @property
    def label(self) -> str:
        return "context_len" if not self.below else f"context_len - {self.below}"


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def seq_limit(texts: Mapping[str, str]) -> SeqLimit:
    """The release's own bound on a request's length (see the module docstring)."""
    tp = texts.get(TP_WORKER, "")
    m = _MAX_REQ.search(tp)
    if m is None:
        why = (f"{TP_WORKER} sets no max_req_len from the context length" if tp else
               f"no {TP_WORKER} in this install")
        return SeqLimit(0, f"seq_len = context_len assumed ({why})", assumed=True)
    below = int(m.group(1))
    parts = [f"max_req_len = context_len - {below} ({TP_WORKER}:{_line_of(tp, m.start())})"]
    sched = texts.get(SCHEDULER, "")
    c = _NEW_CAP.search(sched)
    if c is not None:
        cap = int(c.group(1))
        below += cap
        parts.append(f"max_new_tokens <= max_req_len - input_len - {cap} "
                     f"({SCHEDULER}:{_line_of(sched, c.start())})")
    else:
        parts.append(f"no max_new_tokens cap found in {SCHEDULER}: a request may hold "
                     f"max_req_len tokens")
    return SeqLimit(below, f"seq_len <= context_len - {below}: " + "; ".join(parts))
