"""The health wait against real processes on loopback: healthy, fatal signature, death, hang.

Each test starts a small real server process (HTTP on a free port, a log file) whose behaviour
is set by argv; `peek` reads its real log file and asks whether the real process is alive.
"""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from testbed_util import free_port

from ddprobe.cell.health import fatal_match, last_line, wait_healthy
from ddprobe.server.manager import Peek

SERVER = r"""
import http.server, sys, threading, time
port, mode, log = int(sys.argv[1]), sys.argv[2], open(sys.argv[3], "a", buffering=1)
t0 = time.monotonic()
log.write("[2026-01-01 00:00:00 TP0] Load weight begin. avail mem=275.00 GB\n")
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        up = mode == "healthy" and time.monotonic() - t0 > 0.3
        log.write(f"GET {self.path} {'200' if up else '503'}\n")
        self.send_response(200 if up else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()
if mode == "fatal":
    time.sleep(0.2)
    log.write("[2026-01-01 00:00:01 TP0] Capture cuda graph begin.\n")
    log.write("torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n")
    time.sleep(60)  # stays alive: only the log tells
if mode == "late":  # like SGLang: the HTTP server listens only once loading is done
    time.sleep(0.8)
    mode = "healthy"
    t0 -= 1.0
if mode == "die":
    time.sleep(0.2)
    log.write("Killed\n")
    sys.exit(1)
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"""


class Proc:
    def __init__(self, mode: str, tmp: Path) -> None:
        self.port, self.log = free_port(), tmp / f"{mode}.log"
        self.log.write_text("")
        self.p = subprocess.Popen([sys.executable, "-c", SERVER, str(self.port), mode,
                                   str(self.log)], stdin=subprocess.DEVNULL)
        self.peeks = 0
        self.report_listening = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def peek(self, offset: int) -> Peek:
        self.peeks += 1
        data = self.log.read_bytes()
        listening = None
        if self.report_listening:
            with socket.socket() as s:
                listening = s.connect_ex(("127.0.0.1", self.port)) == 0
        return Peek(self.p.poll() is None, data[offset:].decode(), len(data), listening)


@pytest.fixture
def proc(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Proc]:
    p = Proc(request.param, tmp_path)
    try:
        yield p
    finally:
        p.p.kill()
        p.p.wait()


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[float, str, str]] = []

    def health(self, elapsed: float, timeout: float, stage: str, last: str) -> None:
        self.calls.append((elapsed, stage, last))


@pytest.mark.parametrize("proc", ["healthy"], indirect=True)
def test_healthy_after_both_endpoints(proc: Proc) -> None:
    rec = Recorder()
    res = wait_healthy(proc.url, proc.peek, timeout=20, reporter=rec)
    assert res.status == "healthy" and res.healthy and res.stage == "/health_generate"
    # upper bound generous for a loaded machine, under the 20 s timeout it must beat
    assert 0.3 <= res.elapsed < 15
    log = proc.log.read_text()
    assert "GET /health 200" in log and "GET /health_generate 200" in log
    assert log.index("GET /health 200") < log.index("GET /health_generate 200")
    # polls back off from 50 ms: a short wait makes a handful, not hundreds
    assert 3 <= res.polls <= 25 and res.peeks >= 1
    assert rec.calls and {s for _, s, _ in rec.calls} <= {"/health", "/health_generate"}
    assert any("GET /health" in last or "Load weight" in last for _, _, last in rec.calls)


@pytest.mark.parametrize("proc", ["fatal"], indirect=True)
def test_fatal_signature_ends_the_wait_at_once(proc: Proc) -> None:
    t0 = time.monotonic()
    res = wait_healthy(proc.url, proc.peek, timeout=30)
    # the log decided, well before the 30 s deadline (generous for a loaded machine)
    assert res.status == "fatal" and time.monotonic() - t0 < 20
    assert res.match is not None and res.match.signature.kind == "cuda_illegal_address"
    assert res.match.phase == "capture"
    assert proc.p.poll() is None  # it was still running: the log alone decided


@pytest.mark.parametrize("proc", ["die"], indirect=True)
def test_process_death_ends_the_wait(proc: Proc) -> None:
    res = wait_healthy(proc.url, proc.peek, timeout=30)
    # the death decided, well before the 30 s deadline (generous for a loaded machine)
    assert res.status == "died" and res.elapsed < 20 and res.match is None
    assert "Killed" in res.log and res.last_line == "Killed"


@pytest.mark.parametrize("proc", ["hang"], indirect=True)
def test_deadline_is_a_timeout(proc: Proc) -> None:
    res = wait_healthy(proc.url, proc.peek, timeout=1.5)
    # the last request is capped at the time left (at least 0.5 s): 8 s, generous for a loaded
    # machine, would still mean the wait ignored its deadline
    assert res.status == "timeout" and 1.5 <= res.elapsed < 8
    assert res.stage == "/health" and "GET /health 503" in proc.log.read_text()


def test_last_line_and_fatal_match() -> None:
    assert last_line("a\nCapturing batches (bs=8):  10%\rCapturing batches (bs=4):  20%\n\n") \
        == "Capturing batches (bs=4):  20%"
    assert last_line("") == ""
    assert fatal_match("Detected errors during sampling! NaN in the logits\n") is None
    m = fatal_match("RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling "
                    "`cublasGemmEx( handle, ...)`\n")
    assert m is not None and m.signature.kind == "cublas"


@pytest.mark.parametrize("proc", ["late"], indirect=True)
def test_no_http_polls_until_the_port_listens(proc: Proc) -> None:
    """While the host says the port is closed, the wait looks at the host instead of knocking
    on the closed port through the tunnel."""
    proc.report_listening = True
    res = wait_healthy(proc.url, proc.peek, timeout=20)
    assert res.status == "healthy" and res.elapsed >= 0.8
    assert res.polls <= 3  # /health, /health_generate (+ at most one early 503)
    assert res.peeks >= 4  # the host was asked instead, at the polling cadence


@pytest.mark.parametrize("proc", ["hang"], indirect=True)
def test_a_log_that_stops_growing_is_a_stalled_start(proc: Proc) -> None:
    # expected: the log stops after its first line; with a 1 s stall window the wait ends as
    # `stalled` long before the 30 s deadline
    res = wait_healthy(proc.url, proc.peek, timeout=30, stall=1.0)
    assert res.status == "stalled" and 1.0 <= res.elapsed < 20  # generous, under 30 s
