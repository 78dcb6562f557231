"""Failure signatures on real log text.

The error strings are quoted exactly from docs/notes/crash-signatures.md (each case
names its thread), SGLang's own sources (log lines of the 0.4.10-0.5.23 wheels) and the
compute-sanitizer output captured on an H200 (../shared/data/h200/). The log framing around
them (timestamps, [TP0] prefixes, pids) is what SGLang/vLLM/torch print, and is varied between
"hosts" to prove normalisation.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from ddprobe.errors import ConfigError
from ddprobe.results import Signature
from ddprobe.signatures import (
    best_match,
    classify_phase,
    find_matches,
    load_catalogue,
    match_all,
    match_log,
    normalise,
    strip_prefix,
)

H200 = Path("/work/shared/data/h200")
TORCH_TAIL = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


def _sglang_log(body: str, *, stamp: str = "2026-05-01 10:00:0", tp: str = "TP0",
                pid: int = 4242) -> str:
    """A server log: SGLang start-up lines, then `body` lines with the logger prefix."""
    pre = f"[{stamp}1 {tp}] "
    head = (f"{pre}server_args=ServerArgs(model_path='/models/x', port=30000)\n"
            f"{pre}Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, "
            f"avail mem=60.12 GB, mem usage=15.40 GB.\n"
            f"{pre}Started server process [{pid}]\n")
    return head + "".join(f"{pre}{line}\n" if line and not line.startswith((" ", "\t")) else
                          f"{line}\n" for line in body.splitlines())


# --- docs/notes/crash-signatures.md, one case per thread ------------------------------------------

SERVING = ("Capture cuda graph end. Time elapsed: 31.02 s. mem usage=2.10 GB. avail mem=40.00 GB.\n"
           "The server is fired up and ready to roll!\n"
           "Prefill batch. #new-seq: 1, #new-token: 32, #cached-token: 0, token usage: 0.00\n")


def test_illegal_address_6309_serving() -> None:
    # sglang#6309: `CUDA error: an illegal memory access was encountered`, after a long run
    log = _sglang_log(SERVING + "Scheduler hit an exception: Traceback (most recent call last):\n"
                      '  File "/usr/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py",'
                      " line 2571, in run_scheduler_process\n"
                      "    scheduler.event_loop_normal()\n"
                      "RuntimeError: CUDA error: an illegal memory access was encountered\n"
                      + TORCH_TAIL)
    m = best_match(log)
    assert m is not None
    assert m.signature == Signature("cuda_illegal_address",
                                    "CUDA error: an illegal memory access was encountered",
                                    m.signature.line)
    assert m.phase == "serving" and m.outcome == "crash"
    assert "illegal memory access" in m.signature.line


def _capture_ima_32666(stamp: str, tp: str, pid: int, bs: int, secs: str) -> str:
    # sglang#32666: capture of the target-verify graph dies at bs=5 (exact strings quoted)
    return _sglang_log(
        "Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=5\n"
        f"Capturing batches (bs={bs} avail_mem=20.11 GB):  40%|####      | 2/5 [00:{secs}<00:02]\n"
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/model_executor/'
        'cuda_graph_runner.py", line 388, in __init__\n'
        "    self.capture()\n"
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
        + TORCH_TAIL +
        "\nDuring handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/model_executor/'
        'cuda_graph_runner.py", line 392, in __init__\n'
        "    raise Exception(\n"
        "Exception: Capture cuda graph failed: CUDA error: an illegal memory access was "
        "encountered\n"
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n",
        stamp=stamp, tp=tp, pid=pid)


def test_capture_time_failure_is_tagged_and_equal_across_hosts() -> None:
    a = _capture_ima_32666("2026-05-01 10:00:0", "TP0", 4242, 5, "01")
    b = _capture_ima_32666("2026-06-17 23:59:4", "TP3", 98765, 5, "07")
    ma, mb = best_match(a), best_match(b)
    assert ma is not None and mb is not None
    assert ma.phase == "capture"
    assert ma.signature.kind == "cuda_illegal_address"
    assert ma.signature.key == "[capture] CUDA error: an illegal memory access was encountered"
    assert ma.signature == mb.signature or (ma.signature.kind, ma.signature.key) == (
        mb.signature.kind, mb.signature.key)
    assert ma.signature.id == mb.signature.id
    assert ma.details_dict["capture_bs"] == "5"
    assert ma.details_dict["capture_tokens_per_req"] == "5"
    assert classify_phase(a) == "capture"


def test_same_error_at_serving_and_capture_differ() -> None:
    cap = best_match(_capture_ima_32666("2026-05-01 10:00:0", "TP0", 1, 5, "01"))
    srv = best_match(_sglang_log(SERVING + "RuntimeError: CUDA error: an illegal memory access "
                                 "was encountered"))
    assert cap and srv and cap.signature.id != srv.signature.id
    assert cap.signature.kind == srv.signature.kind


def test_padded_replay_segfault_25512_blames_illegal_address() -> None:
    log = _sglang_log(
        SERVING +
        "EAGLE draft cuda graph replay padding: raw_bs=3 graph_bs=4 raw_out_cache_loc=9 "
        "padded_out_cache_loc=12 steps=3 topk=1\n"
        "Fatal Python error: Segmentation fault\n"
        "\n"
        "Thread 0x00007f3a2c7fe640 (most recent call first):\n"
        '  File "/sgl/python/sglang/srt/speculative/eagle_worker_v2.py", line 611 in '
        "forward_batch_generation\n"
        "CUDA error: an illegal memory access was encountered\n")
    m = best_match(log)
    assert m is not None and m.signature.kind == "cuda_illegal_address"
    assert m.details_dict.get("padded_replay") == "raw_bs=3 graph_bs=4"
    kinds = [s.kind for s in match_all(log)]
    assert kinds.index("cuda_illegal_address") < kinds.index("segfault")


def test_kvtc_22930_cuda_error_illegal_address_token() -> None:
    m = best_match(_sglang_log(SERVING + "Error: cudaErrorIllegalAddress on the first "
                               "TARGET_VERIFY graph replay (pid 3131)"))
    assert m and m.signature.kind == "cuda_illegal_address"
    # the driver's name and torch's message are one failure: one key, one bisect mode
    assert m.signature.key == "CUDA error: an illegal memory access was encountered"


CUBLAS_19081 = ("RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling "
                "`cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b, "
                "CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, CUDA_R_32F, "
                "CUBLAS_GEMM_DEFAULT_TENSOR_OP)`")


def test_cublas_19081_alone() -> None:
    m = best_match(_sglang_log(SERVING + CUBLAS_19081))
    assert m and m.signature.kind == "cublas"
    assert m.signature.key == "CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmEx"
    assert "secondary" in m.hint


def test_illegal_address_before_later_cublas_line() -> None:
    log = _sglang_log(SERVING + "torch.AcceleratorError: CUDA error: an illegal memory access "
                      "was encountered\n" + CUBLAS_19081)
    sigs = match_all(log)
    assert [s.kind for s in sigs][:2] == ["cuda_illegal_address", "cublas"]
    assert match_log(log) == sigs[0]


def test_cublas_first_then_illegal_address_still_root_cause_is_ima() -> None:
    # the catalogue ranks an illegal address above cuBLAS wherever it appears
    log = _sglang_log(SERVING + CUBLAS_19081 + "\nCUDA error: an illegal memory access was "
                      "encountered")
    assert match_log(log).kind == "cuda_illegal_address"  # type: ignore[union-attr]


def test_num_active_captures_35437() -> None:
    log = _sglang_log(
        "Capture cuda graph begin. This can take up to several minutes. avail mem=20.00 GB\n"
        'RuntimeError: num_active_captures_ > 0 INTERNAL ASSERT FAILED at '
        '"/pytorch/c10/cuda/CUDACachingAllocator.cpp":3211, please report a bug to PyTorch. '
        "markCaptureEnd called with no captures")
    m = best_match(log)
    assert m and m.signature.kind == "capture" and m.phase == "capture"
    assert m.signature.key == "num_active_captures_ > N INTERNAL ASSERT FAILED"


def test_stream_capturing_not_permitted() -> None:
    m = best_match(_sglang_log(
        "Capture draft cuda graph begin. This can take up to several minutes. avail mem=9.5 GB\n"
        "RuntimeError: CUDA error: operation not permitted when stream is capturing"))
    assert m and m.signature.kind == "capture"
    assert m.signature.key == "operation not permitted when stream is capturing"


def test_value_error_39685_in_capture_traceback_fallback() -> None:
    log = _sglang_log(
        "Capture cuda graph begin. This can take up to several minutes. avail mem=30.00 GB\n"
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", '
        "line 3001, in run_scheduler_process\n"
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)\n"
        '  File "/venv/lib/python3.12/site-packages/sglang/srt/models/qwen3_next.py", '
        "line 877, in forward\n"
        "    hidden_states, aux = self.model(input_ids, positions)\n"
        "    ^^^^^^^^^^^^^^^^^^^^^\n"
        "ValueError: too many values to unpack (expected 2)\n")
    m = best_match(log)
    assert m and m.signature.kind == "traceback"
    assert m.signature.key == ("[capture] ValueError: too many values to unpack (expected N) "
                               "(in qwen3_next.py:forward)")


def test_accept_len_one_24795_is_not_a_crash() -> None:
    log = _sglang_log(SERVING + "Decode batch. #running-req: 1, #token: 1090, token usage: 0.01, "
                      "accept len: 1.00, accept rate: 0.00, cuda graph: True, gen throughput "
                      "(token/s): 51.32, #queue-req: 0")
    assert match_log(log) is None
    assert classify_phase(log) == "serving"


def test_watchdog_hang_35822() -> None:
    m = best_match(_sglang_log(SERVING + "Watchdog timeout (self.watchdog_timeout=300)"))
    assert m and m.signature.kind == "hang" and m.outcome == "hang"


def test_vllm_range_entry_32591() -> None:
    log = ("(EngineCore_0 pid=2211) ERROR 01-19 08:12:44 [core.py:710] EngineCore encountered a "
           "fatal error.\n"
           "(EngineCore_0 pid=2211) Traceback (most recent call last):\n"
           '(EngineCore_0 pid=2211)   File "/venv/lib/python3.12/site-packages/vllm/compilation/'
           'piecewise_backend.py", line 186, in __call__\n'
           "(EngineCore_0 pid=2211)     assert range_entry is not None\n"
           "(EngineCore_0 pid=2211)            ^^^^^^^^^^^^^^^^^^^^^^^^\n"
           "(EngineCore_0 pid=2211) AssertionError\n")
    m = best_match(log)
    assert m and m.signature.kind == "capture_range"
    assert m.signature.key == "assert range_entry is not None"


def test_vllm_ima_43682_and_rocm_fault_52816() -> None:
    m = best_match("(VllmWorker rank=3 pid=77) torch.AcceleratorError: CUDA error: an illegal "
                   "memory access was encountered")
    assert m and m.signature.kind == "cuda_illegal_address"
    r1 = best_match("Memory access fault by GPU node-2 (Agent handle: 0x5581e0c0b2d0) on address "
                    "0x7f0c4c200000. Reason: Page not present or supervisor privilege.")
    r2 = best_match("Memory access fault by GPU node-9 (Agent handle: 0x11aa) on address "
                    "0x7fff00001000. Reason: Page not present or supervisor privilege.")
    assert r1 and r2 and r1.signature.kind == "rocm_memory_fault"
    assert r1.signature.id == r2.signature.id
    assert r1.details_dict["reason"] == "Page not present or supervisor privilege"


def test_dflash_146_cuda_error_illegal_address() -> None:
    assert match_log("ERROR: cudaErrorIllegalAddress under concurrent load").kind == \
        "cuda_illegal_address"  # type: ignore[union-attr]


def test_trtllm_mla_shape_error_15790_numbers_stripped() -> None:
    def log(shape: str, size: int) -> str:
        return _sglang_log(SERVING + "Traceback (most recent call last):\n"
                           '  File "/x/sglang/srt/layers/attention/trtllm_mla_backend.py", '
                           "line 901, in forward_extend\n"
                           "    q = q.view(-1, layer.tp_q_head_num, layer.head_dim)\n"
                           f"RuntimeError: shape '{shape}' is invalid for input of size {size}\n")
    a = match_log(log("[9, -1, 32, 576]", 516096))
    b = match_log(log("[12, -1, 32, 576]", 688128))
    assert a and b and a.kind == "traceback" and a == Signature(b.kind, b.key, a.line)
    assert a.key == ("RuntimeError: shape '[N, N, N, N]' is invalid for input of size N "
                     "(in trtllm_mla_backend.py:forward_extend)")


# --- other catalogue classes --------------------------------------------------------------

def test_device_side_assert_prefers_the_assertion_line() -> None:
    log = _sglang_log(
        SERVING +
        "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], "
        "thread: [3,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of "
        "bounds\"` failed.\n"
        "RuntimeError: CUDA error: device-side assert triggered\n" + TORCH_TAIL)
    m = best_match(log)
    assert m and m.signature.kind == "cuda_device_assert"
    assert m.signature.key.startswith("IndexKernel.cu:N: operator(): block: [N], thread: [N] "
                                      "Assertion -sizes[i] <= index")
    plain = best_match(_sglang_log(SERVING + "RuntimeError: CUDA error: device-side assert "
                                   "triggered"))
    assert plain and plain.signature.key == "CUDA error: device-side assert triggered"


@pytest.mark.parametrize("line,kind,key", [
    ("RuntimeError: CUDA error: misaligned address", "cuda_misaligned_address",
     "CUDA error: misaligned address"),
    ("torch.AcceleratorError: CUDA error: unspecified launch failure", "cuda_launch_failure",
     "CUDA error: unspecified launch failure"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
     "capacity of 139.81 GiB of which 1.50 GiB is free.", "oom", "CUDA out of memory"),
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "oom",
     "Not enough memory. Please try to increase --mem-fraction-static"),
    ("[rank0]:[E805 12:00:00.123456 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
     "collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
     "Timeout(ms)=600000) ran for 600047 milliseconds before timing out.", "nccl",
     "NCCL watchdog: collective operation timeout (ALLREDUCE)"),
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
     "NCCLUtils.hpp:275, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL "
     "version 2.21.5", "nccl", "NCCL error: unhandled cuda error"),
    ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072, "
     "Hardware limit: 101376. Reducing block sizes or `num_stages` may help.", "triton",
     "triton.runtime.errors.OutOfResources: out of resource: shared memory"),
    ("triton.compiler.errors.CompilationError: at 32:22:", "triton",
     "triton.compiler.errors.CompilationError"),
    ("Fatal Python error: Segmentation fault", "segfault", "Segmentation fault"),
    ("Detected errors during sampling! NaN in the logits.", "nan",
     "Detected errors during sampling! NaN in the logits"),
    ("launch_server.py: error: unrecognized arguments: --speculative-ddtree-budget 16",
     "refused", "unrecognized arguments: --speculative-ddtree-budget N"),
    ("launch_server.py: error: argument --attention-backend: invalid choice: 'fa9' (choose "
     "from 'triton', 'torch_native', 'fa3', 'flashinfer')", "refused",
     "argument --attention-backend: invalid choice: 'fa9' (choose from 'triton', "
     "'torch_native', 'fa3', 'flashinfer')"),
    ("RuntimeError: CUDA error: invalid argument", "cuda_error", "CUDA error: invalid argument"),
    ("CUDNN_STATUS_INTERNAL_ERROR", "cudnn", "CUDNN_STATUS_INTERNAL_ERROR"),
    ("TokenizerManager hit an exception: ", "exception", "TokenizerManager hit an exception"),
])
def test_catalogue_classes(line: str, kind: str, key: str) -> None:
    sig = match_log(_sglang_log(SERVING + line))
    assert sig is not None
    assert (sig.kind, sig.key) == (kind, key)


def test_argparse_refusal_with_usage_block() -> None:
    log = ("usage: launch_server.py [-h] --model-path MODEL_PATH [--port PORT]\n"
           "                        [--cuda-graph-max-bs-decode N]\n"
           "launch_server.py: error: unrecognized arguments: --cuda-graph-max-bs 8\n")
    m = best_match(log)
    assert m and m.outcome == "refused" and m.phase == "startup"
    assert m.signature.key == "unrecognized arguments: --cuda-graph-max-bs N"


def test_h200_sanitizer_overrun_names_kernel_and_allocation() -> None:
    text = (H200 / "compute-sanitizer-memcheck-overrun.txt").read_text()
    m = best_match(text)
    assert m and m.signature.kind == "sanitizer_oob"
    assert m.signature.key == "Invalid __global__ write of size N bytes in write_mask"
    assert m.details_dict["allocation_size"] == "295,560"
    # the launch failure the sanitizer provokes is reported too, but second
    kinds = [s.kind for s in match_all(text)]
    assert kinds == ["sanitizer_oob", "cuda_launch_failure"]


def test_h200_sanitizer_with_caching_allocator_finds_nothing() -> None:
    text = (H200 / "compute-sanitizer-memcheck-caching-allocator.txt").read_text()
    assert match_log(text) is None and match_all(text) == []


def test_shutdown_keyboard_interrupt_is_not_a_failure() -> None:
    log = _sglang_log(SERVING + "Traceback (most recent call last):\n"
                      '  File "/venv/lib/python3.12/site-packages/uvicorn/server.py", line 68, '
                      "in serve\n    await self._serve(sockets)\nKeyboardInterrupt\n")
    assert match_log(log) is None


def test_first_traceback_wins_over_later_ones() -> None:
    log = ("Traceback (most recent call last):\n"
           '  File "/a/b/first.py", line 1, in root\n    x()\nKeyError: \'draft_model\'\n'
           "Traceback (most recent call last):\n"
           '  File "/a/b/second.py", line 2, in later\n    y()\nTypeError: nope\n')
    assert match_log(log).key == "KeyError: 'draft_model' (in first.py:root)"  # type: ignore


def test_empty_and_clean_logs() -> None:
    assert match_log("") is None
    assert match_all("INFO all good\n") == []
    assert classify_phase("") == "startup"


def test_classify_phase_transitions() -> None:
    log = ("Load weight end.\n"
           "Capture cuda graph begin. This can take up to several minutes. avail mem=1 GB\n"
           "Capture cuda graph end. Time elapsed: 3.0 s. mem usage=1 GB. avail mem=1 GB.\n"
           "The server is fired up and ready to roll!\n")
    assert classify_phase(log, line_no=1) == "startup"
    assert classify_phase(log, line_no=2) == "capture"
    assert classify_phase(log, line_no=3) == "startup"
    assert classify_phase(log) == "serving"


# --- normalisation ------------------------------------------------------------------------

@pytest.mark.parametrize("raw,clean", [
    ("[2026-05-01 10:00:01 TP0] hello", "hello"),
    ("[2026-05-01 10:00:01 DP1 TP3 EP3] hello", "hello"),
    ("[rank0]: hello", "hello"),
    ("Aug 05 12:34:56 gpu-7 python[1234]: [2026-05-01 10:00:01 TP0] hello", "hello"),
    ("2026-05-01T10:00:01.123456789Z hello", "hello"),
    ("INFO 08-05 12:34:56 [engine.py:123] hello", "hello"),
    ("(EngineCore_0 pid=12345) hello", "hello"),
    ("\x1b[31mERROR:sglang.srt.managers.scheduler:\x1b[0m hello", "hello"),
    ("========= hello", "hello"),
])
def test_strip_prefix(raw: str, clean: str) -> None:
    assert strip_prefix(raw) == clean


def test_normalise_blanks_what_varies_and_keeps_identifiers() -> None:
    a = normalise("[2026-05-01 10:00:01 TP0] pid 4242 at 0x7fce36848300 took 12.5 s on GPU 3 "
                  "(/root/venv/lib/python3.12/site-packages/sglang/srt/x.py) CUDA_R_16BF sm_103")
    b = normalise("[2027-01-09 03:04:05 TP7] pid 99 at 0x1 took 0.25 s on GPU 0 "
                  "(/opt/other/sglang/srt/x.py) CUDA_R_16BF sm_103")
    assert a == b
    assert a == "pid N at <addr> took N s on GPU N (x.py) CUDA_R_16BF sm_103"
    assert len(normalise("x" * 1000)) <= 200


def test_match_is_fast_on_a_large_log() -> None:
    filler = "".join(f"[2026-05-01 10:00:{i % 60:02d} TP0] Decode batch. #running-req: {i % 9}, "
                     f"#token: {i}, token usage: 0.01, accept len: 3.{i % 10}0, gen throughput "
                     f"(token/s): 250.00\n" for i in range(50_000))
    log = filler + "[2026-05-01 10:01:00 TP0] " + CUBLAS_19081 + "\n"
    t0 = time.perf_counter()
    sig = match_log(log)
    took = time.perf_counter() - t0
    assert sig is not None and sig.kind == "cublas"
    # ~0.5 s here; 10 s is generous for a loaded machine, and a matcher super-linear in the
    # log's length would take minutes on 50,000 lines
    assert took < 10.0, took


def test_every_catalogue_entry_is_exercised() -> None:
    """A catalogue entry without a test case is dead weight: each must match something here."""
    samples = [
        "launch_server.py: error: unrecognized arguments: --x",
        (H200 / "compute-sanitizer-memcheck-overrun.txt").read_text(),
        "Memory access fault by GPU node-2", "CUDA error: an illegal memory access was "
        "encountered", "CUDA error: misaligned address", "device-side assert triggered",
        "CUDA error: unspecified launch failure", "operation not permitted when stream is "
        "capturing", "assert range_entry is not None", CUBLAS_19081, "CUDNN_STATUS_BAD_PARAM",
        "CUDA out of memory", "triton.compiler.errors.CompilationError: at 1:2:",
        "CUDA error: invalid argument", "NCCL error in: x.cpp:1, unhandled cuda error",
        "Fatal Python error: Segmentation fault", "NaN in the logits",
        "Watchdog timeout (self.watchdog_timeout=300)",
        "Traceback (most recent call last):\n  File \"a.py\", line 1, in f\n    g()\nOSError: x",
        "Scheduler hit an exception: ", "OSError: [Errno 98] Address already in use",
        "Invalid __global__ read of size 16 bytes\n    at k+0x10 in a.cu:1\n"
        "    Address 0x7f0000000002 is misaligned",
        "Prefill out of memory. Try to lower your batch size.",
        "Not enough memory. Please try to increase --mem-fraction-static.",
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE)",
        "ncclUnhandledCudaError: Call to CUDA function failed.",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
        "Fatal Python error: Aborted", 'Thread 123 (idle): "MainThread"',
        "Received sigquit from a child process. It usually means the child failed.",
        "[2024-12-13 01:47:34] Initialization failed. warmup error: Traceback",
        "RuntimeError: Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture.",
        "ValueError: token_to_kv_pool_allocator memory leak detected! available_size=1",
        "RuntimeError: The size of tensor a (32000) must match the size of tensor b (151936) "
        "at non-singleton dimension 1",
        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
        "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'",
        "[sgl_kernel] CRITICAL: Could not load any common_ops library!",
        "ImportError: /x/sgl_kernel/common_ops.abi3.so: undefined symbol: _ZN5torch3jit",
    ]
    hit = {m.entry for s in samples for m in find_matches(s)}
    assert hit == {e.id for e in load_catalogue().entries}


# --- a bad catalogue is one clear error ---------------------------------------------------

@pytest.mark.parametrize("body,line,key", [
    ("entries:\n  - id: a\n    kind: x\n    outcome: crash\n    patterns: ['(']\n", 5, "patterns"),
    ("entries:\n  - id: a\n    kind: x\n    outcome: boom\n    patterns: ['a']\n", 4, "outcome"),
    ("entries:\n  - id: a\n    kind: x\n    outcome: crash\n    patterns: ['a']\n    colour: red\n",
     6, "colour"),
    ("entries:\n  - id: a\n    kind: x\n    outcome: crash\n    patterns: ['a']\n    hint: h\n"
     "  - id: a\n    kind: y\n    outcome: crash\n    patterns: ['b']\n    hint: h\n", 7, "id"),
    ("entries: []\n", 1, "entries"),
])
def test_bad_catalogue_names_file_line_key(tmp_path: Path, body: str, line: int,
                                           key: str) -> None:
    p = tmp_path / f"cat{line}{key}.yaml"
    p.write_text(body)
    with pytest.raises(ConfigError) as exc:
        load_catalogue(str(p))
    assert exc.value.path == str(p) and exc.value.line == line and exc.value.key == key
    assert str(p) in str(exc.value)


# --- issue 11: keys on the real message, one key per failure, prefixes, the catalogue itself -

def test_the_bundled_catalogue_is_valid_and_every_hint_is_whole() -> None:
    cat = load_catalogue()
    for e in cat.entries:
        assert e.hint and len(e.hint) > 20, e.id
        # a hint cut by an unquoted ` #` ends mid-sentence, e.g. "(sglang PR"
        assert e.hint.count("(") == e.hint.count(")"), (e.id, e.hint)
        assert not e.hint.rstrip().endswith(("PR", "(", ",")), (e.id, e.hint)
    assert "#19177" in cat.entry("nccl_error").hint


@pytest.mark.parametrize("body,line,key", [
    ("entries:\n  - id: a\n    kind: x\n    outcome: crash\n    patterns: ['a']\n"
     "    hint: see sglang PR #19177 first\n", 6, None),
    ("entries:\n  - id: a\n    kind: x\n    outcome: crash\n    patterns: ['a']\n", 2, "hint"),
    ("entries:\n  - id: a\n    kind: x\n    outcome: crash\n    patterns: ['(?P<k>a)']\n"
     "    key: 'x {nope}'\n    hint: h\n", 6, "key"),
])
def test_catalogue_mistakes_found_on_load(tmp_path: Path, body: str, line: int,
                                          key: str | None) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(body)
    with pytest.raises(ConfigError) as exc:
        load_catalogue(str(p))
    assert exc.value.line == line and exc.value.key == key


def test_a_block_hint_may_contain_a_hash(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("entries:\n  - id: a\n    kind: x\n    outcome: crash\n    patterns: ['a']\n"
                 "    hint: >-\n      see sglang PR #19177\n      first\n")
    assert load_catalogue(str(p)).entries[0].hint == "see sglang PR #19177 first"


def test_sanitizer_misaligned_is_not_out_of_bounds() -> None:
    log = ("========= COMPUTE-SANITIZER\n"
           "========= Invalid __global__ read of size 16 bytes\n"
           "=========     at void flashinfer::BatchPrefillKernel<128>(Params)+0x1c30 in "
           "prefill.cuh:412\n"
           "=========     by thread (0,0,0) in block (3,0,0)\n"
           "=========     Address 0x7f1a2c000408 is misaligned\n")
    m = best_match(log)
    assert m is not None and m.signature.kind == "sanitizer_misaligned"
    assert "names the undersized buffer" not in m.hint and "not an out-of-bounds" in m.hint


NCCL_TB = ("Traceback (most recent call last):\n"
           '  File "/x/sglang/srt/distributed/device_communicators/pynccl_wrapper.py", line 401, '
           "in NCCL_CHECK\n"
           '    raise RuntimeError(f"NCCL error: {error_str}")\n'
           "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for "
           "details)\n")


def test_nccl_is_keyed_on_the_message_not_the_source_line() -> None:
    m = best_match(NCCL_TB)
    assert m is not None and m.signature.kind == "nccl"
    assert m.signature.key == "NCCL error: unhandled cuda error"
    assert m.signature.line.startswith("RuntimeError: NCCL error: unhandled")
    torch_style = best_match("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/"
                             "csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled cuda "
                             "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2")
    assert torch_style is not None and torch_style.signature.key == m.signature.key


def test_flashinfer_and_torch_illegal_access_are_one_key() -> None:
    fi = best_match("RuntimeError: CUDA Error: an illegal memory access was encountered (700) "
                    "/workspace/include/flashinfer/attention/decode.cuh: line 857")
    th = best_match("torch.AcceleratorError: CUDA error: an illegal memory access was "
                    "encountered\nCUDA kernel errors might be asynchronously reported")
    assert fi is not None and th is not None
    assert (fi.signature.kind, fi.signature.key) == (th.signature.kind, th.signature.key)


@pytest.mark.parametrize("prefix", [
    "", "[2026-03-02 10:11:12 TP0] ", "[03-02 10:11:12 TP0] ",
    "(RayWorkerWrapper pid=48213, ip=10.0.0.7) ", "(pid=48213) ",
    "2026-03-02T10:11:12.123456789Z stderr F ", "2026-03-02T10:11:12.123456789Z stdout P ",
    "sglang-1  | ", "sglang_server_1  | [2026-03-02 10:11:12 TP3] ",
    "[pod/sglang-0/sglang] ", "[pod/sglang-0/sglang] [2026-03-02 10:11:12 DP0 TP0 EP0] ",
])
def test_log_prefixes_are_stripped_before_matching(prefix: str) -> None:
    line = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    m = best_match(prefix + line)
    assert m is not None and m.entry == "oom_kv_pool_too_small"
    assert m.signature.line == line.rstrip(".") + "." or m.signature.line == line


def test_xid_number_is_kept_in_the_key() -> None:
    a = best_match("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.")
    b = best_match("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, Graphics SM Warp Exception")
    assert a and b and a.signature.key == "NVRM: Xid 79" and b.signature.key == "NVRM: Xid 13"
