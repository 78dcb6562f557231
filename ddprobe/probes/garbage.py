"""Garbage detection without a judge model, and the differential check against a baseline.

Broken speculative decoding produces text that is degenerate in measurable ways: loops of
the same few words, control or U+FFFD characters, text that compresses far too well; or,
more subtly, fluent text that simply differs from what a known-good config produced for the
same greedy prompt. The thresholds are calibrated so the bundled suite's reference answers
(code with docstrings and loops) never trip them (tests/test_probes_garbage.py).
"""
from __future__ import annotations

import re
import unicodedata
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ddprobe.results import ProbeSummary, Signature

REPETITION_MAX: Final = 0.6  # share of word 3-grams that repeat an earlier one
PERIODIC_RUN_MIN: Final = 80  # chars covered by back-to-back copies of one short unit
NONPRINTABLE_MAX: Final = 0.02
COMPRESSION_MIN: Final = 0.12  # zlib size / text size, below it the text is a loop
MIN_CHARS_FOR_STATS: Final = 200  # shorter texts are judged on characters only

# A unit of 1-40 chars with a letter or digit in it, repeated back to back 4+ more times
# (indentation and ruler lines like "-----" are not loops).
_PERIODIC: Final = re.compile(r"([^\n]{1,40}?)\1{4,}")
_ALNUM: Final = re.compile(r"[^\W_]")
_WORDS: Final = re.compile(r"\S+")

NOTE_ACCEPT_ONE: Final = (
    "acceptance length is exactly 1.00 (every draft rejected): this can be a configuration "
    "error rather than a graph bug, e.g. an EAGLE3 draft served with --speculative-algorithm "
    "EAGLE gives exactly 1.00 (SGLang PR #21272)")
NOTE_ACCEPT_NOT_CORRECTNESS: Final = (
    "acceptance length alone is not a correctness signal: with CUDA graphs on, TensorRT-LLM "
    "PR #17110 saw GSM8K fall 96.17 -> 88.21 while acceptance stayed 1.318 vs 1.319; "
    "judge by the coding results")


@dataclass(frozen=True)
class TextStats:
    chars: int
    repetition_ratio: float
    periodic_run: int
    nonprintable_share: float
    compression_ratio: float | None  # None for texts too short to say


def text_stats(text: str) -> TextStats:
    n = len(text)
    words = _WORDS.findall(text)
    grams = [tuple(words[i:i + 3]) for i in range(max(0, len(words) - 2))]
    rep = 1.0 - len(set(grams)) / len(grams) if len(grams) >= 20 else 0.0
    run = max((len(m.group(0)) for m in _PERIODIC.finditer(text) if _ALNUM.search(m.group(1))),
              default=0)
    bad = sum(1 for ch in text if _nonprintable(ch))
    raw = text.encode("utf-8", "surrogatepass")  # JSON may carry a lone surrogate ("\\ud800")
    comp = len(zlib.compress(raw, 9)) / max(1, len(raw)) if n >= MIN_CHARS_FOR_STATS else None
    return TextStats(chars=n, repetition_ratio=round(rep, 3), periodic_run=run,
                     nonprintable_share=round(bad / n, 4) if n else 0.0,
                     compression_ratio=round(comp, 3) if comp is not None else None)


def garbage_flags(text: str) -> list[str]:
    """Why this answer looks like garbage ([] when it does not)."""
    if not text.strip():
        return ["empty"]
    s = text_stats(text)
    flags = []
    if s.repetition_ratio > REPETITION_MAX:
        flags.append(f"repetition {s.repetition_ratio:.2f}")
    if s.periodic_run >= PERIODIC_RUN_MIN:
        flags.append(f"loop of {s.periodic_run} chars")
    if s.nonprintable_share > NONPRINTABLE_MAX:
        flags.append(f"non-printable {s.nonprintable_share:.0%}")
    if s.compression_ratio is not None and s.compression_ratio < COMPRESSION_MIN:
        flags.append(f"compresses to {s.compression_ratio:.2f}")
    return flags


def first_difference(a: str, b: str) -> int | None:
    """Index of the first differing character, or None when equal."""
    if a == b:
        return None
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def divergence(text: str, baseline: str) -> str | None:
    """'char N: expected ... got ...' when greedy text differs from the baseline's."""
    i = first_difference(text, baseline)
    if i is None:
        return None
    lo = max(0, i - 20)
    return (f"char {i}: expected {_clip(baseline[lo:i + 20])!r}, got {_clip(text[lo:i + 20])!r}")


def summarise_divergence(texts: Mapping[str, str], baseline: Mapping[str, str]) -> str | None:
    """One line over all tasks the baseline knows: how many differ and where the first does."""
    common = [k for k in texts if k in baseline]
    diffs = [(k, first_difference(texts[k], baseline[k])) for k in common]
    bad = [(k, i) for k, i in diffs if i is not None]
    if not bad:
        return None
    k, _ = min(bad, key=lambda kv: (kv[1] or 0, kv[0]))
    return f"{len(bad)}/{len(common)} answers differ from the baseline; first: {k} at " + \
        (divergence(texts[k], baseline[k]) or "")


def acceptance_notes(accept_length: float | None, server_accept: float | None,
                     passed: int, total: int) -> list[str]:
    notes = []
    seen = [v for v in (accept_length, server_accept) if v is not None]
    if any(abs(v - 1.0) < 0.005 for v in seen):
        notes.append(NOTE_ACCEPT_ONE)
    if seen and total and passed < total and all(v > 1.05 for v in seen):
        notes.append(NOTE_ACCEPT_NOT_CORRECTNESS)
    if not seen:
        notes.append("no acceptance length: the server reported neither spec_accept_length nor "
                     "spec_verify_ct (speculative decoding off, or not an SGLang server)")
    return notes


def garbage_signature(summary: ProbeSummary) -> Signature | None:
    """A Signature(kind="garbage") for a summary whose answers are wrong, else None.

    The key holds only what is stable between hosts and runs (which checks tripped, not
    counts or positions), so cells with the same kind of garbage group together.
    """
    parts: set[str] = set()
    if summary.total and summary.passed < summary.total:
        parts.add("coding failed")
    for flag in summary.garbage_flags:
        parts.add(flag.split(" ")[0])
    if summary.divergence:
        parts.add("diverged from baseline")
    if not parts:
        return None
    acc = [v for v in (summary.accept_length, summary.server_accept_length) if v is not None]
    if acc and all(v < 1.05 for v in acc):
        parts.add("accept 1.00")
    line = "; ".join([summary.label] + summary.garbage_flags +
                     ([summary.divergence] if summary.divergence else []))
    return Signature("garbage", ", ".join(sorted(parts)), line)


def _nonprintable(ch: str) -> bool:
    if ch in "\n\r\t":
        return False
    if ch == "\ufffd":
        return True
    cat = unicodedata.category(ch)
    return cat in ("Cc", "Cs", "Co", "Cn")


def _clip(s: str) -> str:
    return s.replace("\n", "\\n")
