"""Probes and signatures against the REAL testbed server (seed scenario, the case in
../shared/seed/): budget 8 is fine, 16 crashes with an illegal address on the first request,
32 serves garbage with acceptance 1.00, 64 dies in cuBLAS while capturing graphs, and 16
without CUDA graphs is fine again."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from testbed_util import TestbedDied, ddtree, install_prefix, running_testbed, start_testbed

from ddprobe.probes import run_probes
from ddprobe.probes.garbage import NOTE_ACCEPT_ONE
from ddprobe.signatures import best_match

TASKS = ["reverse_words", "fizzbuzz", "roman_to_int", "stack_class", "two_sum", "chunk_list"]


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield install_prefix(tmp_path_factory.mktemp("tb") / "prefix")


def test_budget_8_is_healthy(prefix: Path) -> None:
    with running_testbed(prefix, *ddtree(8)) as srv:
        report = run_probes(srv.url, tasks=TASKS, concurrency=6, timeout=60)
        log = srv.log()
    s = report.summary
    assert (s.passed, s.total) == (len(TASKS), len(TASKS)), s.failures
    assert s.accept_source and s.accept_length is not None and s.accept_length > 2.0
    assert s.server_accept_length is not None and s.server_accept_length > 2.0
    assert s.garbage_flags == [] and report.ok
    assert best_match(log) is None


def test_budget_16_crashes_with_illegal_address_when_serving(prefix: Path) -> None:
    with running_testbed(prefix, *ddtree(16)) as srv:
        report = run_probes(srv.url, tasks=TASKS[:2], concurrency=2, timeout=30)
        srv.wait_exit(timeout=15)
        log = srv.log()
    assert report.summary.passed == 0
    m = best_match(log)
    assert m is not None, log[-2000:]
    assert m.signature.kind == "cuda_illegal_address" and m.phase == "serving"
    assert m.signature.key == "CUDA error: an illegal memory access was encountered"


def test_budget_16_without_graphs_is_healthy(prefix: Path) -> None:
    with running_testbed(prefix, *ddtree(16, graph=False)) as srv:
        report = run_probes(srv.url, tasks=TASKS, concurrency=6, timeout=60)
    assert report.summary.passed == len(TASKS), report.summary.failures


def test_budget_32_serves_garbage_with_acceptance_one(prefix: Path) -> None:
    with running_testbed(prefix, *ddtree(32)) as srv:
        # garbage never stops early: cap the answer length to keep the test short
        report = run_probes(srv.url, tasks=TASKS, concurrency=6, timeout=60, max_tokens=160)
        log = srv.log()
    s = report.summary
    assert s.passed == 0
    assert s.accept_length is not None and s.accept_length < 1.05
    assert NOTE_ACCEPT_ONE in s.notes
    assert s.garbage_flags, s
    assert best_match(log) is None  # no crash in the log: only the probes can see this one


def test_budget_64_fails_in_cublas_during_capture(prefix: Path) -> None:
    srv = start_testbed(prefix, *ddtree(64))
    try:
        with pytest.raises(TestbedDied):
            srv.wait_healthy(timeout=15)
        log = srv.log()
    finally:
        srv.stop()
    m = best_match(log)
    assert m is not None, log[-2000:]
    assert m.signature.kind == "cublas" and m.phase == "capture"
    assert m.signature.key == "[capture] CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmEx"
