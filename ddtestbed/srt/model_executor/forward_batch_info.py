"""The inputs of one target-verify forward pass."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..speculative.ddtree import DraftTree


@dataclass
class ForwardBatch:
    seq_lens: list[int]  # tokens already in the KV cache, per request
    kv_locs: list[Sequence[int]]  # their KV locations, per request
    trees: list[DraftTree]
    num_draft_tokens: int
    sampling: list[tuple[float, int]]  # (temperature, seed) per request

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens)

    def kv_indptr(self) -> list[int]:
        out, total = [], 0
        for n in self.seq_lens:
            out.append(total)
            total += n
        return out
