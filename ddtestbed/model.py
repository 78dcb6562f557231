"""The testbed's deterministic target model and its drafter.

Target: a pure function from a visible token sequence to the next token. If the sequence holds
a known coding task (and, for chat, the assistant turn after it) the model continues the task's
answer; for other chat turns it continues a canned reply chosen by the conversation; otherwise
(or once the text has left the expected answer) it continues fluent generic text keyed on the
last few tokens. Because it is a function of what attention lets it *see*, a wrong tree mask
or a wrong KV index gives a wrong token, exactly like a real model.

Drafter: agrees with the target's greedy token with probability `accuracy * decay**(depth-1)`,
decided by a hash of the position, so the same step drafts the same way whatever the budget.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from .knowledge import GENERIC_CORPUS, GENERIC_REPLIES, Task
from .tokenizer import EOS_TOKEN_IDS, IM_END_ID, Tokenizer

ASSISTANT_MARKER = "<|im_start|>assistant\n"
DRAFT_RANK_PROBS = (0.7, 0.18, 0.07, 0.03, 0.02, 0.01, 0.005, 0.0025)
_ALT_PIECES = (" ", "\n", "the", ",", ".", "(", ")", ":", "_", "=", "return", "a", "    ", "1",
               "0", "s", "in", "if", "x", "for", "of", "and", "to", "is")


def u01(*key: object) -> float:
    """A deterministic uniform number in [0, 1) from a key (any repr-able values)."""
    h = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2.0 ** 64


def _mix01(key: tuple[int | tuple[int, ...], ...]) -> float:
    """Fast deterministic uniform in [0, 1) from ints: tuples of ints hash the same in every
    process (no hash randomisation for ints), then a splitmix64 finaliser spreads the bits."""
    z = hash(key) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) / 2.0 ** 64


_DRAFT, _ALT, _SAMPLE, _SAMPLE_ALT, _TIE, _RANDOM = 1, 2, 3, 4, 5, 6


@dataclass(frozen=True)
class Context:
    """What the model derived from a visible prefix (cached per prefix)."""

    prefix_len: int
    expected: tuple[int, ...] | None  # the answer being produced, if any
    pos: int  # tokens of `expected` already in the prefix
    tail: tuple[int, ...]  # last tokens of the prefix, for generic continuation


class TargetModel:
    def __init__(self, tokenizer: Tokenizer, tasks: Sequence[Task], *,
                 random_weights: bool = False) -> None:
        self.tok = tokenizer
        # --load-format dummy: random weights; the next token is still a function of what
        # attention lets the model see, but of nothing it learned (garbage, never EOS)
        self.random_weights = random_weights
        self.tasks = [(t.prompt, tuple(tokenizer.encode(t.answer)) + (IM_END_ID,)) for t in tasks]
        # near ties: a one-space token inside a code line (not indentation, not in a string)
        # is as likely as two spaces to a real model, and either reads the same to Python
        self._sp, self._sp2 = tokenizer.token_id(" "), tokenizer.token_id("  ")
        self._ties = {answer: self._near_ties(answer) for _, answer in self.tasks}
        self.replies = [tuple(tokenizer.encode(r)) + (IM_END_ID,) for r in GENERIC_REPLIES]
        corpus = tokenizer.encode(GENERIC_CORPUS)
        self._start = corpus[0]
        self._ngrams: list[dict[tuple[int, ...], int]] = [{}, {}, {}]
        for order, table in zip((4, 2, 1), self._ngrams):
            ring = corpus + corpus[:order]
            for i in range(len(corpus)):
                table.setdefault(tuple(ring[i:i + order]), ring[i + order])
        alt_ids = [tokenizer.token_id(p) for p in _ALT_PIECES]
        self._alt_rotations = [alt_ids[i:] + alt_ids[:i] for i in range(len(alt_ids))]
        self._cache: OrderedDict[tuple[int, ...], Context] = OrderedDict()
        self._lock = threading.Lock()

    # -- context analysis -------------------------------------------------------------------
    def context(self, prefix: tuple[int, ...]) -> Context:
        with self._lock:
            ctx = self._cache.get(prefix)
            if ctx is not None:
                self._cache.move_to_end(prefix)
                return ctx
        ctx = self._analyse(prefix)
        with self._lock:
            self._cache[prefix] = ctx
            while len(self._cache) > 256:
                self._cache.popitem(last=False)
        return ctx

    def _analyse(self, prefix: tuple[int, ...]) -> Context:
        tail = prefix[-4:]
        text = self.tok.decode(prefix)
        expected: tuple[int, ...] | None = None
        anchor = -1
        best = -1
        for prompt, answer in self.tasks:
            at = text.rfind(prompt) if prompt else -1
            if at > best:
                best, anchor, expected = at, at + len(prompt), answer
        marker = text.rfind(ASSISTANT_MARKER)
        if expected is not None and marker >= anchor:
            anchor = marker + len(ASSISTANT_MARKER)
        elif expected is None and marker >= 0:
            anchor = marker + len(ASSISTANT_MARKER)
            expected = self.replies[int(u01("reply", text[:marker]) * len(self.replies))]
        if expected is None:
            return Context(len(prefix), None, 0, tail)
        start = self._token_index(prefix, anchor)
        generated = prefix[start:] if start is not None else None
        if generated is None or not self._follows(expected, generated):
            return Context(len(prefix), None, 0, tail)
        return Context(len(prefix), expected, len(generated), tail)

    def _near_ties(self, answer: tuple[int, ...]) -> frozenset[int]:
        out, line = set(), ""
        for i, t in enumerate(answer):
            piece = self.tok.piece(t)
            if t == self._sp and line.strip() and line.count('"') % 2 == 0 \
                    and line.count("'") % 2 == 0 and i + 1 < len(answer) \
                    and self.tok.piece(answer[i + 1]) not in ("\n", " "):
                out.add(i)
            line = "" if piece == "\n" else line + piece
        return frozenset(out)

    def _follows(self, expected: tuple[int, ...], generated: tuple[int, ...]) -> bool:
        """Is `generated` the start of `expected`, up to near-tie choices (two spaces for one
        inside a code line): a model continues its answer after such a choice."""
        n = len(generated)
        if n > len(expected):
            return False
        if expected[:n] == generated:
            return True
        return self._tied(expected, 0, generated)

    def _tied(self, expected: tuple[int, ...], start: int, got: Sequence[int]) -> bool:
        """`got` equals expected[start:] up to near-tie choices."""
        ties = self._ties.get(expected, frozenset())
        if not ties or start + len(got) > len(expected):
            return False
        return all(g == e or (i in ties and g == self._sp2)
                   for i, g, e in zip(range(start, start + len(got)), got, expected[start:]))

    def near_tie(self, ctx: Context, extra: Sequence[int]) -> int | None:
        """The runner-up token where the greedy one is a near tie (else None)."""
        exp = ctx.expected
        if exp is None:
            return None
        i = ctx.pos + len(extra)
        if i in self._ties.get(exp, frozenset()) and self.next_token(ctx, extra) == self._sp:
            return self._sp2
        return None

    def _token_index(self, prefix: tuple[int, ...], char_pos: int) -> int | None:
        """Index of the token that starts at `char_pos`; None if it falls inside a token."""
        pos = 0
        for i, length in enumerate(self.tok.piece_lengths(prefix)):
            if pos == char_pos:
                return i
            if pos > char_pos:
                return None
            pos += length
        return len(prefix) if pos == char_pos else None

    # -- prediction --------------------------------------------------------------------------
    def next_token(self, ctx: Context, extra: Sequence[int]) -> int:
        """Greedy next token after `prefix + extra` (random weights: a random function)."""
        if self.random_weights:
            last = (ctx.tail + tuple(extra))[-4:]
            rot = self._alt_rotations[int(_mix01((_RANDOM, ctx.prefix_len + len(extra), last))
                                          * len(self._alt_rotations))]
            return rot[0]
        return self.trained_next(ctx, extra)

    def trained_next(self, ctx: Context, extra: Sequence[int]) -> int:
        """The trained model's greedy next token (what a real-weight draft learned)."""
        exp = ctx.expected
        if exp is not None:
            p, n = ctx.pos, len(extra)
            if p + n < len(exp) and (n == 0 or exp[p:p + n] == tuple(extra)
                                     or self._tied(exp, p, extra)):
                return exp[p + n]
        return self._continue((ctx.tail + tuple(extra))[-4:])

    def _continue(self, last: tuple[int, ...]) -> int:
        four, two, one = self._ngrams
        for table, order in ((four, 4), (two, 2), (one, 1)):
            if len(last) >= order:
                nxt = table.get(last[-order:])
                if nxt is not None:
                    return nxt
        return self._start

    def sample(self, ctx: Context, extra: Sequence[int], temperature: float, seed: int,
               flip_ties: int = 0, salt: int = 0) -> int:
        """Sampled next token: the greedy one, or with a temperature-dependent probability an
        alternative. Keyed on (seed, absolute position), so verification stays lossless.
        `flip_ties` N > 0: logits perturbed (a stale scale): at one near tie in N (by
        position) the runner-up wins, even greedily; `salt` != 0 picks other positions (a
        reduction order of its own)."""
        greedy = self.next_token(ctx, extra)
        if flip_ties > 0:
            alt = self.near_tie(ctx, extra)
            position = ctx.prefix_len + len(extra)
            key = (_TIE, salt, position) if salt else (_TIE, position)
            if alt is not None and int(_mix01(key) * flip_ties) == 0:
                return alt
        if temperature <= 0.0:
            return greedy
        position = ctx.prefix_len + len(extra)
        if _mix01((_SAMPLE, seed, position)) >= min(0.5, 0.002 * temperature):
            return greedy
        return self.alternatives(greedy, (_SAMPLE_ALT, seed, position))[0]

    def alternatives(self, token: int, key: tuple[int | tuple[int, ...], ...]) -> list[int]:
        """Plausible wrong tokens (never `token`), in an order chosen by `key`."""
        rotations = self._alt_rotations
        rot = rotations[int(_mix01((_ALT,) + key) * len(rotations))]
        return [a for a in rot if a != token]

    @staticmethod
    def is_eos(token: int) -> bool:
        return token in EOS_TOKEN_IDS


class DraftModel:
    def __init__(self, target: TargetModel, accuracy: float, decay: float, *,
                 random_weights: bool = False) -> None:
        self.target, self.accuracy, self.decay = target, accuracy, decay
        self.random_weights = random_weights  # --speculative-draft-load-format dummy

    def propose(self, ctx: Context, extra: tuple[int, ...], depth: int,
                topk: int) -> list[tuple[int, float]]:
        """Ranked candidates (token, probability) for the token after `prefix + extra`: the
        trained target's token with the draft's accuracy (a draft learned the trained model,
        not a random-weight target); random weights rank plausible wrong tokens only."""
        truth = self.target.trained_next(ctx, extra)
        position = ctx.prefix_len + len(extra)
        tail = extra[-2:]
        if self.random_weights:
            alts = self.target.alternatives(truth, (_DRAFT, position, tail, _RANDOM))
            return [(t, DRAFT_RANK_PROBS[i])
                    for i, t in enumerate(alts[:min(topk, len(DRAFT_RANK_PROBS))])]
        u = _mix01((_DRAFT, position, tail, truth))
        alts = self.target.alternatives(truth, (_DRAFT, position, tail))
        acc = self.accuracy * self.decay ** (depth - 1)
        if u < acc:
            ranked = [truth] + alts
        else:
            v = (u - acc) / (1.0 - acc)
            rank = 1 if v < 0.55 else 2 if v < 0.8 else 3 if v < 0.9 else None
            ranked = list(alts)
            if rank is not None:
                ranked.insert(rank, truth)
        k = min(topk, len(DRAFT_RANK_PROBS))
        return [(t, DRAFT_RANK_PROBS[i]) for i, t in enumerate(ranked[:k])]
