"""Cell classification on real log text (SGLang issue threads in the field notes, the testbed)
and real probe reports (built by the probe runner's own summarise)."""
from __future__ import annotations

from ddprobe.cell.classify import (
    Baseline,
    argparse_refusal,
    classify_dead,
    classify_hang,
    classify_served,
    excerpt,
    launch_failure,
    refused_signature,
)
from ddprobe.probes.runner import ProbeReport, TaskResult, summarise
from ddprobe.results import Outcome, Signature

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


# --- issue 11: crashes while serving, refusals on current releases, hints and keys ----------

SGL = "/usr/local/lib/python3.12/dist-packages/sglang"
READY = """\
[2026-03-02 10:11:12 TP0] Load weight end. type=Qwen3ForCausalLM, avail mem=60.1 GB
[2026-03-02 10:11:30] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
[2026-03-02 10:11:40] The server is fired up and ready to roll!
[2026-03-02 10:11:50 TP0] Decode batch, #running-req: 4, #token: 900, token usage: 0.01, \
accept len: 3.10, accept rate: 0.70, cuda graph: True, gen throughput (token/s): 410.22, \
#queue-req: 0
"""
# A scheduler traceback with no fatal-severity line (no "Scheduler hit an exception", no
# CUDA error): the kind of serving crash that was `garbage` or `error` before.
UNKNOWN_TB = f"""\
[2026-03-02 10:11:51 TP0] Traceback (most recent call last):
  File "{SGL}/srt/managers/scheduler.py", line 3012, in event_loop_overlap
    batch_result = self.run_batch(batch)
  File "{SGL}/srt/speculative/eagle_worker_v2.py", line 611, in verify
    accept_index = accept_index[: bs * self.speculative_num_steps]
IndexError: index 64 is out of bounds for dimension 0 with size 64
"""


def _errored(n: int = 2, why: str = "chat: http://x: Server disconnected") -> ProbeReport:
    return _report([_task(f"t{i}", False, "", errors=(why,)) for i in range(n)])


def test_a_traceback_after_the_ready_line_is_a_crash_at_any_linger() -> None:
    """Expected: crash with the traceback's own key, whether the process is gone (linger 0),
    still there with its HTTP front hanging (timeouts) or answering errors (health bad)."""
    log = READY + UNKNOWN_TB
    seen = set()
    for alive, health, why in [(False, None, "chat: Server disconnected"),
                               (True, None, "chat: Server disconnected"),
                               (True, "error", "chat: HTTP 500"),
                               (True, "timeout", "chat: http://x: timed out")]:
        v = classify_served(_errored(why=why), alive=alive, log=log, package="sglang",
                            baseline=None, ratio=0.5, health=health)
        assert v.outcome is Outcome.CRASH, (alive, health, v)
        assert v.signature is not None and v.match is not None and v.match.phase == "serving"
        seen.add(v.signature.id)
    assert seen == {"traceback: IndexError: index N is out of bounds for dimension N with size "
                    "N (in eagle_worker_v2.py:verify)"}


def test_health_turning_bad_while_serving_is_a_crash_without_a_log_line() -> None:
    v = classify_served(_errored(), alive=True, log=READY, package="sglang", baseline=None,
                        ratio=0.5, health="error")
    assert v.outcome is Outcome.CRASH and v.signature is not None
    assert v.signature.key == "health turned bad while serving"
    # health fine and the process alive: the probes' network, not the server (infrastructure)
    e = classify_served(_errored(), alive=True, log=READY, package="sglang", baseline=None,
                        ratio=0.5, health="ok")
    assert e.outcome is Outcome.ERROR


def test_a_traceback_the_server_survived_is_a_note_not_a_crash() -> None:
    ok = _report([_task("a", True, GOOD), _task("b", True, GOOD)])
    v = classify_served(ok, alive=True, log=READY + UNKNOWN_TB, package="sglang", baseline=None,
                        ratio=0.5, health=None)
    assert v.outcome is Outcome.OK
    assert any("kept answering" in n for n in v.notes)


def _tb(frames: list[tuple[str, str]], exc: str) -> str:
    out = ["Traceback (most recent call last):"]
    for path, func in frames:
        out += [f'  File "{path}", line 10, in {func}', "    do_it()"]
    return "\n".join(out + [exc]) + "\n"


LAUNCH = (f"{SGL}/launch_server.py", "<module>")
PREPARE = (f"{SGL}/srt/server_args.py", "prepare_server_args")


def test_refusals_in_the_0_5_21_argument_layout() -> None:
    """0.5.21+ validates in srt/arg_groups/*_hook.py and speculative/spec_info.py (read in the
    0.5.23 wheel: handle_speculative_decoding -> SpeculativeAlgorithm.from_string)."""
    hook = _tb([LAUNCH, PREPARE, (f"{SGL}/srt/arg_groups/speculative_hook.py",
                                  "handle_speculative_decoding")],
               "ValueError: speculative_eagle_topk must be 1 when page_size > 1")
    algo = _tb([LAUNCH, PREPARE, (f"{SGL}/srt/arg_groups/speculative_hook.py",
                                  "_handle_eagle_family"),
                (f"{SGL}/srt/speculative/spec_info.py", "from_string")],
               "ValueError: Unknown speculative algorithm name: DDTREEX")
    for log in (hook, algo):
        v = classify_dead(log, package="sglang", during="start-up")
        assert v.outcome is Outcome.REFUSED, log
    # a ValueError deep in the model code is a crash, not the server refusing flags
    model = _tb([LAUNCH, (f"{SGL}/srt/model_executor/model_runner.py", "load_model")],
                "ValueError: weight shape mismatch")
    assert classify_dead(model, package="sglang", during="start-up").outcome is Outcome.CRASH
    # an OSError raised inside a hook (a config it could not read) is not a validation error
    io = _tb([LAUNCH, PREPARE, (f"{SGL}/srt/arg_groups/model_path_hook.py", "resolve")],
             "OSError: [Errno 5] Input/output error")
    assert classify_dead(io, package="sglang", during="start-up").outcome is Outcome.CRASH


def test_oom_hints_follow_the_message() -> None:
    inc = classify_dead("RuntimeError: Not enough memory. Please try to increase "
                        "--mem-fraction-static.\n", package="sglang", during="start-up")
    assert inc.match is not None and "INCREASE --mem-fraction-static" in inc.match.hint
    assert "LOWER --mem-fraction-static" not in inc.match.hint
    cuda = classify_dead("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 "
                         "GiB.\n", package="sglang", during="start-up")
    assert cuda.match is not None and "LOWER --mem-fraction-static" in cuda.match.hint
    pre = classify_dead(READY + "RuntimeError: Prefill out of memory. Try to lower your batch "
                        "size.\n", package="sglang", during="serving")
    assert pre.signature is not None and pre.signature.kind == "oom"
    assert pre.match is not None and "lower the batch" in pre.match.hint
    # three different OOMs, three keys (three bisect modes)
    assert len({inc.signature.key, cuda.signature.key, pre.signature.key}) == 3  # type: ignore


def test_unknown_failures_get_keys_from_their_own_text() -> None:
    a = classify_dead("[x] Load weight begin.\nsafetensors_rust.SafetensorError: Error while "
                      "deserializing header: HeaderTooLarge\n", package="sglang",
                      during="start-up")
    b = classify_dead("[x] Load weight begin.\nzmq.error.ZMQError: Address family not "
                      "supported\n", package="sglang", during="start-up")
    assert a.outcome is b.outcome is Outcome.CRASH
    assert a.signature is not None and b.signature is not None
    assert a.signature.key != b.signature.key
    assert "HeaderTooLarge" in a.signature.key and "ZMQError" in b.signature.key


def test_port_in_use_is_infrastructure_and_xid_is_evidence() -> None:
    v = classify_dead("[2026-03-02 10:11:30] ERROR:    [Errno 98] error while attempting to "
                      "bind on address ('127.0.0.1', 30000): address already in use\n",
                      package="sglang", during="start-up")
    assert v.outcome is Outcome.ERROR and "address already in use" in (v.error or "")
    x = classify_dead(READY + "RuntimeError: CUDA error: an illegal memory access was "
                      "encountered\n[Tue Mar  2 10:11:52 2026] NVRM: Xid (PCI:0000:3b:00): 31, "
                      "pid=4242, name=python3, Ch 0000000d, intr 00000000. MMU Fault\n",
                      package="sglang", during="serving")
    assert x.signature is not None and x.signature.kind == "cuda_illegal_address"
    assert any("NVRM: Xid 31" in n for n in x.notes)
    # a refusal the process outlived is still a refusal, not a hang
    hook = _tb([LAUNCH, PREPARE, (f"{SGL}/srt/arg_groups/speculative_hook.py",
                                  "handle_speculative_decoding")], "ValueError: topk must be 1")
    assert classify_hang(hook, 900, stalled=600).outcome is Outcome.REFUSED


def test_a_stall_is_a_hang() -> None:
    v = classify_hang("[x TP0] Load weight end.\n", 900, stalled=600)
    assert v.outcome is Outcome.HANG and v.signature is not None
    assert v.signature.key == "start-up stalled (startup)" and "600s" in (v.error or "")
    spy = classify_hang(READY + 'Process 4242: python3 -m sglang.launch_server\nPython v3.12.3 '
                        '(/usr/bin/python3.12)\n\nThread 4242 (idle): "MainThread"\n'
                        '    wait (threading.py:355)\n', 900)
    assert spy.signature is not None and spy.signature.kind == "hang" and spy.match is not None


def test_a_program_missing_from_the_servers_path_is_infrastructure() -> None:
    # real SGLang 0.5.11 on the H200 (docs/gpu-results.md, 2026-12-02): the NGRAM worker
    # JIT-builds its corpus with tvm_ffi, which runs `ninja`; with ninja off the server's PATH
    # every cell died at start-up, graph and eager alike, and bisect called it `kernel (high)`
    from pathlib import Path
    log = (Path(__file__).parent / "data" / "sglang-0.5.11-h200-ngram-no-ninja.log").read_text()
    v = classify_dead(log, package="sglang", during="start-up")
    assert v.outcome is Outcome.ERROR and v.signature is None
    assert v.error is not None and "'ninja'" in v.error and "server.env PATH" in v.error
    # a missing file named by its path is not a program lookup: still the server's crash
    other = log.replace("'ninja'", "'/models/x/config.json'")
    assert classify_dead(other, package="sglang", during="start-up").outcome is Outcome.CRASH
