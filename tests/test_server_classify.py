"""Cell classification on real log text (SGLang issue threads in the field notes, the testbed)
and real probe reports (built by the probe runner's own summarise)."""
from __future__ import annotations

from ddprobe.probes.runner import ProbeReport, TaskResult, summarise
from ddprobe.results import Outcome, Signature
from ddprobe.server.classify import (Baseline, argparse_refusal, classify_dead, classify_hang,
                                     classify_served, excerpt, launch_failure,
                                     refused_signature)

# sglang#32666 (field notes, section 2a row 5): dies during verify-graph capture
CAPTURE_IMA = """\
[2026-03-02 10:11:12 TP0] Load weight end. type=Qwen3ForCausalLM, avail mem=60.1 GB
[2026-03-02 10:11:20 TP0] Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=5
torch.AcceleratorError: CUDA error: an illegal memory access was encountered
Exception: Capture cuda graph failed: CUDA error: an illegal memory access was encountered
[2026-03-02 10:11:21] Received sigquit from a child process. It usually means the child failed.
"""
ARGPARSE = """\
usage: launch_server.py [-h] --model-path MODEL_PATH [--cuda-graph-max-bs-decode N]
launch_server.py: error: unrecognized arguments: --cuda-graph-max-bs 64
"""
POST_INIT = """\
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/sglang/launch_server.py", line 11, in <module>
    server_args = prepare_server_args(sys.argv[1:])
  File "/venv/lib/python3.11/site-packages/sglang/srt/server_args.py", line 912, in __post_init__
    raise ValueError("page_size must be 1 for DDTree")
ValueError: page_size must be 1 for DDTree
"""


def test_crash_during_capture_takes_the_root_cause() -> None:
    v = classify_dead(CAPTURE_IMA, package="sglang", during="start-up")
    assert v.outcome is Outcome.CRASH and v.signature is not None
    assert v.signature.kind == "cuda_illegal_address" and v.match is not None
    assert v.match.phase == "capture"


def test_refusals_by_the_servers_own_parser() -> None:
    v = classify_dead(ARGPARSE, package="sglang", during="start-up")
    assert v.outcome is Outcome.REFUSED and v.signature is not None
    assert v.signature.kind == "refused" and "--cuda-graph-max-bs" in (v.error or "")
    s = argparse_refusal(ARGPARSE)
    assert s is not None and s.key.startswith("unrecognized arguments: --cuda-graph-max-bs")
    assert argparse_refusal("launch_server.py: error: x") is None  # no usage block: not argparse
    p = classify_dead(POST_INIT, package="sglang", during="start-up")
    assert p.outcome is Outcome.REFUSED and "page_size must be 1" in (p.error or "")


def test_broken_launch_command_is_infrastructure() -> None:
    for log in ("sh: 1: exec: /opt/venv/bin/python: not found\n",
                "/usr/bin/python3: No module named sglang\n",
                "/usr/bin/python3: Error while finding module specification for "
                "'sglang.launch_server' (ModuleNotFoundError: No module named 'sglang')\n"):
        v = classify_dead(log, package="sglang", during="start-up")
        assert v.outcome is Outcome.ERROR and v.signature is None, log
    # a missing dependency INSIDE the server is the server's failure
    dep = ("Traceback (most recent call last):\n  File \"/x/sglang/srt/layers/a.py\", line 3, "
           "in <module>\n    import flashinfer\nModuleNotFoundError: No module named "
           "'flashinfer'\n")
    assert launch_failure(dep, "sglang") is None
    assert classify_dead(dep, package="sglang", during="start-up").outcome is Outcome.CRASH


def test_death_without_a_known_error_and_hang() -> None:
    v = classify_dead("[2026-01-01 00:00:00] Load weight begin.\nKilled\n", package="sglang",
                      during="start-up")
    assert v.outcome is Outcome.CRASH and v.signature is not None
    assert v.signature.kind == "exit" and v.signature.line == "Killed"
    h = classify_hang("[2026-01-01 00:00:00 TP0] Capture cuda graph begin.\n", 900)
    assert h.outcome is Outcome.HANG and h.signature is not None
    assert h.signature.key == "not healthy before the deadline (capture)"
    w = classify_hang("[x] Watchdog timeout (self.watchdog_timeout=300)\n", 900)
    assert w.signature is not None and w.signature.kind == "hang" and w.match is not None


def _task(tid: str, passed: bool, text: str, tok_s: float = 100.0, acc: float = 4.5,
          errors: tuple[str, ...] = ()) -> TaskResult:
    why = errors[0] if errors else "ok" if passed else "AssertionError"
    return TaskResult(task_id=tid, passed=passed, reason=why,
                      text=text, latency_s=1.0, completion_tokens=100, tok_s=tok_s,
                      accept_length=acc, accept_source="spec_accept_length", errors=errors)


def _report(results: list[TaskResult], baseline: dict[str, str] | None = None) -> ProbeReport:
    summ = summarise(results, wall_s=1.0, server_info=None, baseline=baseline)
    return ProbeReport("coding", "http://x", tuple(results), summ, 1.0, 2)


GOOD = "```python\ndef f(x):\n    return x + 1\n```"


def test_served_outcomes() -> None:
    ok = _report([_task("a", True, GOOD), _task("b", True, GOOD)])
    v = classify_served(ok, alive=True, log="", package="sglang", baseline=None, ratio=0.5)
    assert v.outcome is Outcome.OK and v.signature is None
    bad = _report([_task("a", False, "The The The The", acc=1.0),
                   _task("b", False, "The The The The", acc=1.0)])
    g = classify_served(bad, alive=True, log="", package="sglang", baseline=None, ratio=0.5)
    assert g.outcome is Outcome.GARBAGE and g.signature is not None
    assert g.signature.id == "garbage: accept_length=1.00 coding 0/2"
    slow = Baseline(tok_s=300.0, passed=2, total=2, key="b8-graph")
    d = classify_served(ok, alive=True, log="", package="sglang", baseline=slow, ratio=0.5)
    assert d.outcome is Outcome.DEGRADED and d.signature is not None
    assert "100.0 < 0.5 x baseline 300.0 (b8-graph)" in d.signature.line
    fast = Baseline(tok_s=150.0)
    assert classify_served(ok, alive=True, log="", package="sglang", baseline=fast,
                           ratio=0.5).outcome is Outcome.OK


def test_served_but_dead_or_silent() -> None:
    failed = _report([_task("a", False, "", errors=("chat: http://x: timed out",)),
                      _task("b", False, "", errors=("chat: http://x: timed out",))])
    dead = classify_served(failed, alive=False, log=CAPTURE_IMA, package="sglang",
                           baseline=None, ratio=0.5)
    assert dead.outcome is Outcome.CRASH
    hang = classify_served(failed, alive=True, log="", package="sglang", baseline=None,
                           ratio=0.5)
    assert hang.outcome is Outcome.HANG and hang.signature is not None
    refused = _report([_task("a", False, "", errors=("chat: connection refused",))])
    err = classify_served(refused, alive=True, log="", package="sglang", baseline=None,
                          ratio=0.5)
    assert err.outcome is Outcome.ERROR and err.signature is None
    nan = classify_served(_report([_task("a", True, GOOD)]), alive=True,
                          log="Detected errors during sampling! NaN in the logits\n",
                          package="sglang", baseline=None, ratio=0.5)
    assert nan.outcome is Outcome.GARBAGE and nan.signature is not None
    assert nan.signature.kind == "nan"


def test_divergence_from_the_baseline_is_garbage() -> None:
    rep = _report([_task("a", True, GOOD)], baseline={"a": GOOD.replace("+ 1", "+1")})
    v = classify_served(rep, alive=True, log="", package="sglang",
                        baseline=Baseline(texts={"a": GOOD.replace("+ 1", "+1")}), ratio=0.5)
    assert v.outcome is Outcome.GARBAGE and v.signature is not None
    assert v.signature.key.endswith("divergence")


def test_excerpt_and_refused_signature() -> None:
    log = "\n".join(["CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmEx"]
                    + [f"line {i}" for i in range(40)])
    sig = Signature("cublas", "k", "CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmEx")
    ex = excerpt(log, sig, lines=5)
    assert ex[0].startswith("CUBLAS_STATUS") and ex[1] == "..." and ex[-1] == "line 39"
    assert len(excerpt(log, None, lines=5)) == 5
    r = refused_signature("--speculative-bogus is not a flag of sglang 0.5.10 "
                          "(srt/server_args.py); nearest: --speculative-num-steps")
    assert r.kind == "refused" and r.key.startswith("--speculative-bogus is not a flag of sglang")
    assert "nearest" not in r.key and "nearest" in r.line
