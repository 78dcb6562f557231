"""run_probes end to end against a real HTTP server on loopback (SglangShapedServer), with
the real sandbox running every answer's tests."""
from __future__ import annotations

from probes_util import SglangShapedServer

from ddprobe.probes import baseline_from_report, run_probes
from ddprobe.probes.client import SRC_SPEC_ACCEPT_LENGTH, SRC_VERIFY_CT
from ddprobe.probes.garbage import NOTE_ACCEPT_ONE
from ddprobe.probes.runner import NOT_SENT
from ddprobe.results import ProbeSummary

FEW = ["reverse_words", "fizzbuzz", "flatten", "roman_to_int", "stack_class", "eval_rpn"]


def test_correct_server_passes_the_whole_suite(sgl: SglangShapedServer) -> None:
    seen: list[str] = []
    report = run_probes(sgl.url, concurrency=8, progress=lambda r: seen.append(r.task_id))
    s = report.summary
    assert isinstance(s, ProbeSummary)
    n = len(sgl.suite.tasks)
    assert (s.passed, s.total) == (n, n) and s.label == f"coding {n}/{n}"
    assert sorted(seen) == sorted(t.id for t in sgl.suite.tasks)
    assert s.failures == [] and s.garbage_flags == [] and s.divergence is None
    assert s.accept_source == SRC_SPEC_ACCEPT_LENGTH
    assert s.accept_length is not None and 2.5 < s.accept_length < 4.5
    assert s.server_accept_length is not None and 2.5 < s.server_accept_length < 4.5
    assert s.tok_s and s.aggregate_tok_s and s.latency_s is not None
    assert report.ok
    # both endpoints were used for every task, and server info once
    reqs = sgl.behaviour.requests
    assert reqs.count("POST /v1/chat/completions") == n and reqs.count("POST /generate") == n
    assert "GET /server_info" in reqs
    d = report.to_dict()
    assert d["label"] == f"coding {n}/{n}" and len(d["results"]) == n


def test_wrong_answers_fail_with_reasons(sgl: SglangShapedServer) -> None:
    sgl.behaviour.answer = lambda p: "```python\ndef nothing():\n    return None\n```"
    report = run_probes(sgl.url, tasks=FEW, concurrency=6)
    s = report.summary
    assert (s.passed, s.total) == (0, len(FEW)) and not report.ok
    assert all(r.reason.startswith("tests: NameError") for r in report.results), \
        [r.reason for r in report.results]
    assert len(s.failures) == len(FEW) and s.failures[0].split(":")[0] in FEW
    # acceptance looked fine while the answers were wrong: say so
    assert any("PR #17110" in n for n in s.notes)


def test_old_dialect_and_old_server_info(sgl: SglangShapedServer) -> None:
    sgl.behaviour.dialect = "old"
    sgl.behaviour.server_info = "old"
    s = run_probes(sgl.url, tasks=FEW[:2]).summary
    assert s.accept_source == SRC_VERIFY_CT and s.accept_length is not None
    assert s.server_accept_length is not None
    assert "GET /get_server_info" in sgl.behaviour.requests


def test_acceptance_exactly_one_is_called_out(sgl: SglangShapedServer) -> None:
    sgl.behaviour.accept = 1.0
    s = run_probes(sgl.url, tasks=FEW[:3]).summary
    assert s.accept_length == 1.0 and s.passed == 3
    assert NOTE_ACCEPT_ONE in s.notes


def test_acceptance_request_is_short_and_optional(sgl: SglangShapedServer) -> None:
    run_probes(sgl.url, tasks=FEW[:2], accept_tokens=0)
    assert sgl.behaviour.requests.count("POST /generate") == 0
    assert sgl.behaviour.requests.count("POST /v1/chat/completions") == 2


def test_no_spec_metrics_is_noted(sgl: SglangShapedServer) -> None:
    sgl.behaviour.dialect = "none"
    sgl.behaviour.server_info = "none"
    s = run_probes(sgl.url, tasks=FEW[:2]).summary
    assert s.accept_length is None and s.accept_source == "" and s.server_accept_length is None
    assert any("no acceptance length" in n for n in s.notes)
    assert any("server-wide acceptance unknown" in n for n in s.notes)


def test_garbage_answers_are_flagged(sgl: SglangShapedServer) -> None:
    sgl.behaviour.answer = lambda p: "the answer is " + "is the the " * 60
    s = run_probes(sgl.url, tasks=FEW).summary
    assert s.passed == 0
    assert any(f.startswith("loop in 6/6") for f in s.garbage_flags), s.garbage_flags
    assert all("no Python code block" in f for f in s.failures)


def test_differential_check_against_a_baseline(sgl: SglangShapedServer) -> None:
    good = run_probes(sgl.url, tasks=FEW)
    base = baseline_from_report(good)
    assert set(base) == set(FEW) and all("```python" in v for v in base.values())
    same = run_probes(sgl.url, tasks=FEW, baseline=base)
    assert same.summary.divergence is None and same.ok
    normal = sgl.default_answer

    def drift(prompt: str) -> str:
        text = normal(prompt)
        return text.replace("reversed(s.split())", "s.split()[::-1]")  # still correct code

    sgl.behaviour.answer = drift
    diff = run_probes(sgl.url, tasks=FEW, baseline=base)
    assert diff.summary.passed == len(FEW)  # the tests cannot see it...
    assert diff.summary.divergence is not None  # ...the differential check does
    assert diff.summary.divergence.startswith("1/6 answers differ from the baseline; first: "
                                              "reverse_words at char ")
    r = next(r for r in diff.results if r.task_id == "reverse_words")
    assert r.divergence and "reversed" in r.divergence
    assert not diff.ok


def test_probes_run_concurrently(sgl: SglangShapedServer) -> None:
    # behaviour, not a timing ratio (benchmarks/probe_concurrency.py prints the speed-up): the
    # server holds every request until six are in flight; only a concurrent client gets there
    b = sgl.behaviour
    b.hold_until_inflight, b.hold_timeout_s = 6, 20.0
    conc = run_probes(sgl.url, tasks=FEW, concurrency=6)
    assert conc.summary.passed == len(FEW)
    assert b.peak_inflight >= 6 and b.held_out == 0, (b.peak_inflight, b.held_out)
    b.hold_until_inflight, b.peak_inflight = 0, 0
    seq = run_probes(sgl.url, tasks=FEW, concurrency=1)
    assert seq.summary.passed == len(FEW)
    assert b.peak_inflight <= 2  # chat and generate of one task overlap; tasks do not


def test_server_down_fails_every_task_without_raising(sgl: SglangShapedServer) -> None:
    url = sgl.url
    sgl.stop()
    report = run_probes(url, tasks=FEW[:3], timeout=5)
    assert report.summary.passed == 0 and report.summary.total == 3
    assert all(r.reason.startswith("chat: ") and "request failed" in r.reason
               for r in report.results)
    sgl.httpd = _Stopped()  # type: ignore[assignment]


def test_http_500_is_a_failed_task(sgl: SglangShapedServer) -> None:
    sgl.behaviour.status = 500
    report = run_probes(sgl.url, tasks=FEW[:2])
    assert report.summary.passed == 0
    assert all("HTTP 500" in r.reason for r in report.results)


class _Stopped:
    def shutdown(self) -> None:
        pass

    def server_close(self) -> None:
        pass


def test_a_probe_told_the_server_died_stops_sending(sgl: SglangShapedServer) -> None:
    # one task at a time; the first fails and `stop` says the server is gone: the other four
    # are not sent (a cheap cell does not wait for seven more requests to a dead server)
    sgl.behaviour.status = 500
    asked: list[int] = []
    report = run_probes(sgl.url, tasks=FEW[:5], concurrency=1,
                        stop=lambda: asked.append(1) is None)
    assert "HTTP 500" in report.results[0].reason and len(asked) == 1
    assert [r.reason for r in report.results[1:]] == [NOT_SENT] * 4
    assert [r.task_id for r in report.results] == list(FEW[:5])
    # a server still alive (stop says False): every task is sent
    report = run_probes(sgl.url, tasks=FEW[:3], concurrency=1, stop=lambda: False)
    assert all("HTTP 500" in r.reason for r in report.results)
