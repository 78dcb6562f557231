"""A deterministic piece tokenizer: words, runs of spaces, single punctuation, newlines.

Decoding is the concatenation of pieces, so encode/decode round-trips exactly. The vocabulary
grows as new pieces are seen; the knowledge files are encoded first at start-up, so ids are
stable for a given install.
"""
from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
PAD_ID, IM_START_ID, IM_END_ID = 0, 1, 2
EOS_TOKEN_IDS = (IM_END_ID, PAD_ID)

_PIECE = re.compile(
    "|".join(re.escape(t) for t in SPECIAL_TOKENS) + r"|\n|[ \t]+|\w+|[^\w\s]|\s")


class Tokenizer:
    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self._pieces: list[str] = list(SPECIAL_TOKENS)
        self._ids: dict[str, int] = {p: i for i, p in enumerate(self._pieces)}
        self._lock = threading.Lock()
        # printable ASCII first so small ids (e.g. a warmup's [10, 11, 12]) decode to text
        for c in (chr(i) for i in range(32, 127)):
            self._add(c)
        self._add("\n")

    def _add(self, piece: str) -> int:
        i = self._ids.get(piece)
        if i is None:
            i = len(self._pieces)
            self._pieces.append(piece)
            self._ids[piece] = i
        return i

    def __len__(self) -> int:
        return len(self._pieces)

    @staticmethod
    def split(text: str) -> list[str]:
        return _PIECE.findall(text)

    def encode(self, text: str) -> list[int]:
        pieces = self.split(text)
        ids = self._ids
        out = [ids.get(p, -1) for p in pieces]
        if -1 in out:
            with self._lock:
                out = [self._add(p) for p in pieces]
        return out

    def token_id(self, piece: str) -> int:
        with self._lock:
            return self._add(piece)

    def piece(self, token_id: int) -> str:
        if 0 <= token_id < len(self._pieces):
            return self._pieces[token_id]
        return f"<|tok{token_id}|>"

    def decode(self, ids: Iterable[int]) -> str:
        pieces, n = self._pieces, len(self._pieces)
        return "".join(pieces[i] if 0 <= i < n else f"<|tok{i}|>" for i in ids)

    def piece_lengths(self, ids: Sequence[int]) -> list[int]:
        return [len(self.piece(i)) for i in ids]


def apply_chat_template(messages: Sequence[dict[str, object]]) -> str:
    """ChatML, the template of the testbed's model."""
    parts = []
    for m in messages:
        content = m.get("content") or ""
        if isinstance(content, list):  # OpenAI content parts
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"<|im_start|>{m.get('role', 'user')}\n{content}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"
