"""Log rules of issue 25 that need more than one corpus file: what "survived" may mean, and
SGLang's capture-failure advice on its own (its text read from the real 0.5.6.post2 wheel).

Expected, written before the run:
- FlashInfer's illegal address and `Scheduler hit an exception` (sglang#5491's lines), then the
  HTTP front still logging a request (sglang#24402's line): crash with the illegal address,
  not `ok` ("logged before the server got ready, and survived"): no fatal GPU error and no
  scheduler exception is ever survived.
- a log that ends in a traceback before any ready line, the HTTP front answering after it:
  crash on that traceback.
- a missing optional module's traceback at start-up, then the ready line and requests: ok,
  with a note naming it (the one narrow survived case).
- the advice tail alone ("Possible solutions: ... disable CUDA graph by --disable-cuda-graph
  ... Open an issue"): crash in phase capture (SGLang's capture-failure message), not
  `incomplete`.
"""
from __future__ import annotations

import re
import zipfile
from pathlib import Path

from conftest import _wheel

from ddprobe.cell.logverdict import classify_log

LOGS = Path(__file__).parent / "data" / "logs"
POST = '[2026-05-05 02:22:14] INFO:     127.0.0.1:56304 - "POST /generate HTTP/1.1" 200 OK\n'
READY = "[2025-06-01 10:00:05] The server is fired up and ready to roll!\n"


def _excerpt(name: str) -> str:
    return "".join(LOGS.joinpath(name).read_text().splitlines(keepends=True)[2:])


def test_a_fatal_gpu_error_before_the_ready_line_is_never_survived() -> None:
    log = _excerpt("sglang-5491-flashinfer-ima-scheduler-cut.log") + POST
    v = classify_log(log)
    assert v.outcome == "crash", v
    assert v.signature is not None and v.signature.kind == "cuda_illegal_address"
    assert not any("survived" in n for n in v.notes)
    sched = _excerpt("sglang-6309-ray-scheduler-exception-cut.log") + POST
    s = classify_log(sched)
    assert s.outcome == "crash" and s.signature is not None
    assert s.signature.key == "Scheduler hit an exception"


_MISSING = ('Traceback (most recent call last):\n'
            '  File "/usr/lib/python3/site-packages/sglang/srt/entrypoints/openai/'
            'serving_chat.py", line 16, in <module>\n'
            '    from openai_harmony import HarmonyEncodingName\n'
            "ModuleNotFoundError: No module named 'openai_harmony'\n")


def test_only_a_missing_optional_module_is_survived() -> None:
    ok = classify_log(_MISSING + READY + POST)
    assert ok.outcome == "ok", ok
    assert any("survived (a missing optional module)" in n and "openai_harmony" in n
               for n in ok.notes), ok.notes
    # the same traceback as the log's last event is no pass
    ends = classify_log(POST + _MISSING)
    assert ends.outcome == "crash", ends
    other = _MISSING.replace("ModuleNotFoundError: No module named 'openai_harmony'",
                             "RuntimeError: CUDA driver initialization failed")
    assert classify_log(other + READY + POST).outcome == "crash"


def test_sglangs_capture_advice_alone_is_a_capture_failure() -> None:
    with zipfile.ZipFile(_wheel("0.5.6.post2")) as z:
        src = z.read("sglang/srt/model_executor/cuda_graph_runner.py").decode()
    start = src.index('"Possible solutions:\\n"')
    lines = re.findall(r'"([^"]*)\\n"', src[start:start + 800])
    assert lines[0] == "Possible solutions:" and lines[-1].startswith("Open an issue")
    tail = "\n".join(lines) + "\n"
    v = classify_log(tail)
    assert (v.outcome, v.phase) == ("crash", "capture"), v
    assert v.signature is not None and v.signature.kind == "capture_failed"
    assert "--disable-cuda-graph tells whether" in v.hint
