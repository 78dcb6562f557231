"""Garbage detection without a judge, and the differential check, on real texts: the suite's
reference answers (must never be flagged) and degenerate outputs of the kinds broken
speculative decoding produces (loops, replacement characters, empty answers)."""
from __future__ import annotations

import pytest

from ddprobe.probes import garbage
from ddprobe.probes.coding import load_suite

SUITE = load_suite("coding")


@pytest.mark.parametrize("task", SUITE.tasks, ids=[t.id for t in SUITE.tasks])
def test_reference_answers_are_not_garbage(task: object) -> None:
    text = "Here is the solution.\n\n```python\n" + task.solution + "\n```\n"  # type: ignore
    assert garbage.garbage_flags(text) == []


def test_prose_is_not_garbage() -> None:
    text = ("Speculative decoding drafts several tokens with a small model and verifies them "
            "with the target model in one forward pass. When the draft tree grows, the verify "
            "pass becomes wider, and the buffers captured for CUDA graphs must grow with it. "
            "If they do not, the kernels write past the end of an allocation, and what happens "
            "next depends on what lives in the neighbouring memory.")
    assert garbage.garbage_flags(text) == []


@pytest.mark.parametrize("text,flag", [
    ("", "empty"),
    ("   \n\t ", "empty"),
    ("def f(x):\n    return x" + " the the the the" * 40, "loop"),
    ("import os\n" + "for i in range(10):\n    print(i)\n" * 30, "repetition"),
    ("x = 1\n" + "\ufffd" * 30 + "abc " * 30, "non-printable"),
    ("ok " + "\x00\x01\x02\x1b" * 20 + " done", "non-printable"),
    ("a" * 5000, "compresses"),
])
def test_degenerate_outputs_are_flagged(text: str, flag: str) -> None:
    flags = garbage.garbage_flags(text)
    assert any(f.startswith(flag) for f in flags), flags


def test_text_stats_numbers() -> None:
    s = garbage.text_stats("word " * 100)
    assert s.repetition_ratio > 0.9 and s.periodic_run >= 80
    assert s.compression_ratio is not None and s.compression_ratio < 0.1
    assert garbage.text_stats("short").compression_ratio is None


def test_first_difference_and_divergence() -> None:
    assert garbage.first_difference("abc", "abc") is None
    assert garbage.first_difference("abcX", "abcY") == 3
    assert garbage.first_difference("abc", "abcdef") == 3
    d = garbage.divergence("def f():\n    return 2\n", "def f():\n    return 1\n")
    assert d is not None and d.startswith("char 20:")
    assert "return 1" in d and "return 2" in d
    assert garbage.divergence("same", "same") is None


def test_summarise_divergence_reports_count_and_first_position() -> None:
    base = {"a": "hello world", "b": "the same", "c": "abcdef"}
    now = {"a": "hello there", "b": "the same", "c": "abXdef", "d": "not in baseline"}
    line = garbage.summarise_divergence(now, base)
    assert line is not None and line.startswith("2/3 answers differ from the baseline; first: c")
    assert garbage.summarise_divergence(base, base) is None


def test_acceptance_notes_name_the_known_confusions() -> None:
    one = garbage.acceptance_notes(1.0, 1.0, 0, 20)
    assert any("PR #21272" in n and "EAGLE3" in n for n in one)
    fine_but_wrong = garbage.acceptance_notes(3.2, 3.1, 5, 20)
    assert any("PR #17110" in n for n in fine_but_wrong)
    assert garbage.acceptance_notes(3.2, None, 20, 20) == []
    assert any("no acceptance length" in n for n in garbage.acceptance_notes(None, None, 1, 1))


def test_garbage_signature_is_stable_across_runs() -> None:
    from ddprobe.results import ProbeSummary
    a = ProbeSummary(passed=0, total=20, accept_length=1.004, server_accept_length=1.0,
                     garbage_flags=["loop in 20/20 answers", "compresses in 18/20 answers"])
    b = ProbeSummary(passed=1, total=5, accept_length=1.0,
                     garbage_flags=["compresses in 2/5 answers", "loop in 5/5 answers"])
    sa, sb = garbage.garbage_signature(a), garbage.garbage_signature(b)
    assert sa is not None and sb is not None
    assert sa.kind == "garbage" and sa.id == sb.id
    assert sa.key == "accept 1.00, coding failed, compresses, loop"
    assert "coding 0/20" in sa.line
    ok = ProbeSummary(passed=5, total=5, accept_length=3.2)
    assert garbage.garbage_signature(ok) is None
    drift = ProbeSummary(passed=5, total=5, accept_length=3.2, divergence="1/5 answers differ")
    assert garbage.garbage_signature(drift).key == "diverged from baseline"  # type: ignore
