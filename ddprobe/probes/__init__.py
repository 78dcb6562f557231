"""Probes: ask a running server, check the answers (coding suite in a sandbox), measure.

    report = run_probes("http://127.0.0.1:30000", suite="coding", concurrency=8)
    report.summary          # ddprobe.results.ProbeSummary ("coding 20/20", accept length...)
    baseline_from_report(report)   # task id -> greedy text, for a later differential check
"""
from __future__ import annotations

from ddprobe.probes.client import Completion, ProbeClient, ProbeHTTPError
from ddprobe.probes.coding import CodingTask, Suite, check_answer, extract_code, load_suite
from ddprobe.probes.garbage import garbage_flags, garbage_signature
from ddprobe.probes.runner import (
                                   ProbeReport,
                                   TaskResult,
                                   baseline_from_report,
                                   run_probes,
                                   run_probes_async,
                                   summarise,
)
from ddprobe.probes.sandbox import (
                                   SandboxLimits,
                                   SandboxResult,
                                   TestRun,
                                   run_code,
                                   run_code_async,
                                   run_tests,
                                   run_tests_async,
)

__all__ = ["CodingTask", "Completion", "ProbeClient", "ProbeHTTPError", "ProbeReport",
           "SandboxLimits", "SandboxResult", "Suite", "TaskResult", "TestRun",
           "baseline_from_report", "check_answer", "extract_code", "garbage_flags",
           "garbage_signature", "load_suite", "run_code", "run_code_async", "run_probes",
           "run_probes_async", "run_tests", "run_tests_async", "summarise"]
