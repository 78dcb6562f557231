"""A verdict's advice is data (`results.Advice`) and `bisect/advice.py` is the one place it
becomes text: the logic sets numbers, the sentence follows; a later finding lowers a number
and the sentence is written again. A few renderings are golden (the wording users read)."""
from __future__ import annotations

from typing import get_args

import pytest

from ddprobe.bisect import advice
from ddprobe.results import Advice, AdviceKind, NextCommand, Verdict


def _v(a: Advice) -> Verdict:
    return advice.finish(Verdict(kind="ok", budgets=[8], signature=None, outcome="ok",
                                 confidence="high", decided_by="frontier search", advice=a))


@pytest.mark.parametrize("kind", get_args(AdviceKind))
def test_every_advice_kind_renders_a_sentence_with_its_numbers(kind: str) -> None:
    a = Advice(kind, at=32, keep=16, max_bs=4, buffers=["cuda_graph_custom_mask"],  # type: ignore[arg-type]
               where=["triton_backend.py:118"], budgets=[48, 64], decide="more repeats")
    text = advice.render(a)
    assert text and "{" not in text and "None" not in text
    if kind in ("kernel", "graph_capture", "diverged", "workspace", "buffer"):
        assert "keep budget <= 16" in text and "b32" in text or kind == "buffer"
    if kind in ("assumed", "works_assumed"):
        assert "b48, b64" in text


def test_golden_renderings() -> None:
    assert advice.render(Advice("works", keep=8, first_bad=16)) == \
        "budgets up to 8 work with CUDA graphs; b16 is the first failing one"
    assert advice.render(Advice("kernel", at=16)) == (
        "the kernel or algorithm is wrong at b16 without CUDA graphs: try another "
        "--attention-backend at b16, no budget passed with CUDA graphs: run with "
        "--disable-cuda-graph meanwhile, and report it upstream with the signature")
    assert advice.render(Advice("workspace", at=64, keep=32, max_bs=16)) == (
        "--cuda-graph-max-bs 16 at b64 avoids this failure (other failure modes may remain "
        "there), or enlarge the fixed workspace the failing call uses; keep budget <= 32 at "
        "the current max bs")


def test_the_latent_check_lowers_the_number_and_the_sentence_follows() -> None:
    ok = _v(Advice("works", keep=16, first_bad=32))
    cap = _v(Advice("graph_capture", at=32, keep=16))
    other = _v(Advice("kernel", at=64, keep=32))
    advice.lower_keep([ok, cap, other], unsafe=[16], safe=8)
    assert ok.advice is not None and (ok.advice.keep, ok.advice.unsafe) == (8, 16)
    assert ok.next_step.startswith("budgets up to 8 (b16 passes but writes out of bounds) ")
    assert "keep budget <= 8 (b16 passes but writes out of bounds) with graphs," in \
        cap.next_step
    assert other.advice is not None and other.advice.unsafe is None  # 32 was not unsafe
    assert "keep budget <= 32 meanwhile" in other.next_step
    none = _v(Advice("buffer", at=16, keep=8, buffers=["m"], where=["f.py:1"]))
    advice.lower_keep([none], unsafe=[8], safe=None)
    assert none.advice is not None and none.advice.keep is None
    assert none.next_step.endswith(
        "keep budget <= 8 (b8 passes but writes out of bounds: none is safe) with graphs "
        "meanwhile")


def test_the_next_command_is_argv_and_renders_with_its_comment() -> None:
    c = advice.host_cmd("h1", ("server", "logs"))
    c.then = advice.bisect_cmd("h1", "--budgets", "8,16").argv
    assert c.argv == ["ddprobe", "server", "logs", "--host", "h1"]
    assert advice.command_text(c) == \
        "ddprobe server logs --host h1   # then: ddprobe bisect --host h1 --budgets 8,16"
    run = advice.host_cmd(None, ("run",), "--budget", "16", note="the workaround")
    assert advice.command_text(run) == "ddprobe run --host HOST --budget 16   # the workaround"
    assert advice.command_text(None) == ""


def test_advice_travels_through_the_journal_and_old_verdicts_keep_their_text() -> None:
    v = _v(Advice("assumed", budgets=[24],
                  command=NextCommand(["ddprobe", "bisect", "--thorough"], note="n")))
    back = Verdict.from_dict(v.to_dict())
    assert back.advice == v.advice and back.next_step == v.next_step
    old = Verdict(kind="ok", budgets=[8], signature=None, outcome="ok", confidence="high",
                  decided_by="x", next_step="as an old version wrote it")
    assert "advice" not in old.to_dict()  # journals without it are written as they were
    assert advice.finish(Verdict.from_dict(old.to_dict())).next_step == \
        "as an old version wrote it"
