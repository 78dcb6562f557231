"""Run a probe suite against a server, concurrently, and summarise it.

Per task, two greedy requests go out together: chat completions (the answer whose code is
tested in the sandbox) and native /generate on the same prompt (meta_info: acceptance length).
A task whose request fails is a failed task with the HTTP reason: the caller (a cell) decides
whether that was a crash (server gone) or the network (it checks the server separately).
"""
from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final

from ddprobe.defaults import PROBE_CONCURRENCY, PROBE_MAX_TOKENS, PROBE_SUITE, PROBE_TIMEOUT_S
from ddprobe.probes import garbage
from ddprobe.probes.client import (
    MAX_ANSWER_BYTES,
    AnswerTooLarge,
    Completion,
    ProbeClient,
    ProbeHTTPError,
    server_accept_length,
)
from ddprobe.probes.coding import CodingTask, check_answer, load_suite
from ddprobe.probes.sandbox import SandboxLimits
from ddprobe.results import ProbeSummary
from ddprobe.untrusted import one_line

# All answers in flight together stay under this; one answer never gets less than the floor.
MAX_INFLIGHT_BYTES: Final = 64 << 20
MIN_ANSWER_BYTES: Final = 256 << 10
# An answer longer than this (in characters) is garbage at any max_tokens ddprobe sends; only
# its start is kept for the sandbox, the garbage statistics and the differential check.
MAX_TEXT_CHARS: Final = 256 << 10


@dataclass(frozen=True)
class TaskResult:
    task_id: str
    passed: bool
    reason: str  # "ok", or why not (request error, no code, failing assert, sandbox limit)
    text: str = ""  # the greedy chat answer
    latency_s: float | None = None  # chat request, end to end
    completion_tokens: int | None = None
    tok_s: float | None = None  # chat request output tok/s
    accept_length: float | None = None  # from /generate meta_info (or the chat answer)
    accept_source: str = ""
    generate_tok_s: float | None = None
    generate_tokens: int | None = None
    garbage: tuple[str, ...] = ()
    divergence: str | None = None  # vs the baseline's text for this task
    errors: tuple[str, ...] = ()  # request errors (chat/generate)
    check_s: float | None = None  # ddprobe's own time: code extraction + sandboxed tests
    sandbox: str = ""  # the sandbox backend that ran the tests ("bubblewrap", "namespaces")
    generate_ids: tuple[int, ...] | None = None  # the /generate answer's token ids, if sent

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["garbage"] = list(self.garbage)
        d["errors"] = list(self.errors)
        d["generate_ids"] = list(self.generate_ids) if self.generate_ids is not None else None
        return d


@dataclass(frozen=True)
class ProbeReport:
    suite: str
    base_url: str
    results: tuple[TaskResult, ...]
    summary: ProbeSummary
    wall_s: float
    concurrency: int
    server_info: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        s = self.summary
        return s.total > 0 and s.passed == s.total and not s.garbage_flags and not s.divergence

    def to_dict(self) -> dict[str, Any]:
        return {"suite": self.suite, "base_url": self.base_url, "wall_s": self.wall_s,
                "concurrency": self.concurrency, "summary": self.summary.to_dict(),
                "label": self.summary.label, "ok": self.ok, "sandbox": self.sandbox,
                "results": [r.to_dict() for r in self.results]}

    @property
    def sandbox(self) -> str:
        """Which sandbox ran the answers' tests (the backends seen, most used first)."""
        seen = Counter(r.sandbox for r in self.results if r.sandbox)
        return ", ".join(k for k, _ in seen.most_common())


def baseline_from_report(report: ProbeReport) -> dict[str, str]:
    """Task id -> greedy answer text, for a later cell's differential check."""
    return {r.task_id: r.text for r in report.results if not r.errors}


def ids_from_report(report: ProbeReport) -> dict[str, list[int]]:
    """Task id -> the /generate answer's token ids (where the server sent them)."""
    return {r.task_id: list(r.generate_ids) for r in report.results
            if not r.errors and r.generate_ids is not None}


def run_probes(base_url: str, *, suite: str = PROBE_SUITE,
               concurrency: int = PROBE_CONCURRENCY, timeout: float = PROBE_TIMEOUT_S,
               baseline: Mapping[str, str] | None = None,
               progress: Callable[[TaskResult], None] | None = None,
               tasks: Sequence[str] | None = None, max_tokens: int = PROBE_MAX_TOKENS,
               accept_tokens: int = 128,
               limits: SandboxLimits = SandboxLimits(),
               stop: Callable[[], bool] | None = None) -> ProbeReport:
    """Blocking wrapper around `run_probes_async` (do not call from inside an event loop)."""
    return asyncio.run(run_probes_async(base_url, suite=suite, concurrency=concurrency,
                                        timeout=timeout, baseline=baseline, progress=progress,
                                        tasks=tasks, max_tokens=max_tokens,
                                        accept_tokens=accept_tokens, limits=limits, stop=stop))


NOT_SENT: Final = "not sent: the server had died"


async def run_probes_async(base_url: str, *, suite: str = PROBE_SUITE,
                           concurrency: int = PROBE_CONCURRENCY,
                           timeout: float = PROBE_TIMEOUT_S,
                           baseline: Mapping[str, str] | None = None,
                           progress: Callable[[TaskResult], None] | None = None,
                           tasks: Sequence[str] | None = None,
                           max_tokens: int = PROBE_MAX_TOKENS, accept_tokens: int = 128,
                           limits: SandboxLimits = SandboxLimits(),
                           stop: Callable[[], bool] | None = None) -> ProbeReport:
    """Probe `base_url` with a suite; `concurrency` tasks in flight at once.

    `max_tokens` bounds the chat answer (the code); `accept_tokens` bounds the /generate
    request that only measures acceptance (0: skip it), so it adds little load to the batch.
    `stop`: asked (in a thread) after a task whose request failed; True (the server died)
    ends the probe: the tasks still running or waiting are not sent (`NOT_SENT`).
    """
    s = load_suite(suite)
    todo = s.select(list(tasks) if tasks else None)
    sem = asyncio.Semaphore(max(1, concurrency))
    base = dict(baseline or {})
    # the bytes in flight are bounded in total, not per request: concurrency x cap
    cap = max(MIN_ANSWER_BYTES, min(MAX_ANSWER_BYTES, MAX_INFLIGHT_BYTES // max(1, concurrency)))
    per_task = 2 if accept_tokens > 0 else 1  # the chat request, and /generate beside it
    inflight = [0, 0]  # tasks in flight now, the most at once
    async with ProbeClient(base_url, timeout=timeout, max_answer_bytes=cap) as client:
        async def one(task: CodingTask) -> TaskResult:
            async with sem:
                inflight[0] += 1
                inflight[1] = max(inflight)
                try:
                    res = await _probe_task(client, task, max_tokens=max_tokens,
                                            accept_tokens=accept_tokens, limits=limits,
                                            baseline=base.get(task.id))
                finally:
                    inflight[0] -= 1
            if progress is not None:
                progress(res)
            return res

        t0 = time.perf_counter()
        if stop is None:
            results = list(await asyncio.gather(*(one(t) for t in todo)))
        else:
            results = await _until_stopped(todo, one, stop)
        wall = time.perf_counter() - t0
        info: dict[str, Any] | None
        try:
            info = await client.server_info()
        except ProbeHTTPError:
            info = None
    summary = replace(summarise(list(results), wall_s=wall, server_info=info, baseline=base),
                      peak_requests=inflight[1] * per_task)
    return ProbeReport(suite=s.name, base_url=base_url, results=tuple(results),
                       summary=summary, wall_s=wall, concurrency=concurrency, server_info=info)


async def _until_stopped(todo: Sequence[CodingTask], one: Any,
                         stop: Callable[[], bool]) -> list[TaskResult]:
    """The tasks, until one fails and `stop()` says the server is gone: the rest not sent."""
    running = {asyncio.ensure_future(one(t)): t for t in todo}
    done_by_id: dict[str, TaskResult] = {}
    pending = set(running)
    while pending:
        finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        failed = False
        for f in finished:
            r = f.result()
            done_by_id[r.task_id] = r
            failed = failed or bool(r.errors)
        if failed and pending and await asyncio.to_thread(stop):
            for f in pending:
                f.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for f in pending:
                t = running[f]
                done_by_id[t.id] = TaskResult(t.id, False, NOT_SENT, errors=(NOT_SENT,))
            break
    return [done_by_id[t.id] for t in todo]


async def _ask(client: ProbeClient, task: CodingTask, max_tokens: int, accept_tokens: int
               ) -> tuple[Any, Any]:
    """The chat answer and the /generate one (None when not asked), exceptions as values."""
    async def no_generate() -> None:
        return None

    chat_r, gen_r = await asyncio.gather(
        client.chat(task.prompt, max_tokens=max_tokens),
        client.generate(task.prompt, max_new_tokens=accept_tokens) if accept_tokens > 0
        else no_generate(), return_exceptions=True)
    return chat_r, gen_r


def _acceptance(gen: Completion | None, chat: Any) -> tuple[float | None, str]:
    """(acceptance length, its source): /generate's, else the chat answer's."""
    acc, src = (gen.accept_length, gen.accept_source) if gen and gen.accept_source else (None, "")
    if acc is None and isinstance(chat, Completion) and chat.accept_source:
        acc, src = chat.accept_length, chat.accept_source
    return acc, src


async def _probe_task(client: ProbeClient, task: CodingTask, *, max_tokens: int,
                      accept_tokens: int, limits: SandboxLimits,
                      baseline: str | None) -> TaskResult:
    chat_r, gen_r = await _ask(client, task, max_tokens, accept_tokens)
    if isinstance(chat_r, AnswerTooLarge):
        # the server's answer is garbage, not an infrastructure error (never retried)
        return TaskResult(task.id, False, str(chat_r), garbage=(f"runaway answer (over "
                                                                 f"{chat_r.cap >> 10} KiB)",))
    if isinstance(gen_r, AnswerTooLarge):
        gen_r = None
    errors = tuple(f"{name}: {r}" for name, r in (("chat", chat_r), ("generate", gen_r))
                   if isinstance(r, BaseException))
    for r in (chat_r, gen_r):
        if isinstance(r, BaseException) and not isinstance(r, ProbeHTTPError):
            raise r
    gen = gen_r if isinstance(gen_r, Completion) else None
    acc, src = _acceptance(gen, chat_r)
    gen_fields: dict[str, Any] = {
        "generate_tok_s": gen.tok_s if gen else None,
        "generate_tokens": gen.completion_tokens if gen else None}
    if not isinstance(chat_r, Completion):
        return TaskResult(task.id, False, errors[0], accept_length=acc, accept_source=src,
                          errors=errors, **gen_fields)
    return await _checked(task, chat_r, gen, acc, src, errors, gen_fields, limits, baseline)


async def _checked(task: CodingTask, chat: Completion, gen: Completion | None,
                   acc: float | None, src: str, errors: tuple[str, ...],
                   gen_fields: dict[str, Any], limits: SandboxLimits, baseline: str | None
                   ) -> TaskResult:
    """A chat answer, its code run against the task's tests in the sandbox."""
    text, runaway = chat.text, []
    if len(text) > MAX_TEXT_CHARS:  # kept, checked and compared: its start only
        runaway = [f"runaway answer ({len(text)} chars)"]
        text = text[:MAX_TEXT_CHARS]
    t0 = time.perf_counter()
    check = await check_answer(task, text, limits=limits)
    check_s = time.perf_counter() - t0
    return TaskResult(
        # the reason quotes the answer's own output: cleaned and bounded before it is kept
        task_id=task.id, passed=check.passed and not runaway,
        reason=one_line(check.reason, limit=240), text=text,
        latency_s=chat.latency_s, completion_tokens=chat.completion_tokens, tok_s=chat.tok_s,
        accept_length=acc, accept_source=src, **gen_fields,
        generate_ids=gen.output_ids if gen else None,
        garbage=tuple(runaway + garbage.garbage_flags(text)),
        divergence=garbage.divergence(text, baseline) if baseline is not None else None,
        errors=errors, check_s=round(check_s, 4),
        sandbox=_backend_of(check.run.result) if check.run is not None else "")


def _backend_of(res: Any) -> str:
    iso = tuple(getattr(res, "isolation", ()) or ())
    return "bubblewrap" if iso[:1] == ("bubblewrap",) else "namespaces" if iso else ""


def _round(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None else None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _garbage_flags(results: list[TaskResult]) -> list[str]:
    counts = Counter(f.split(" ")[0] for r in results for f in r.garbage)
    return [f"{kind} in {n}/{len(results)} answers" for kind, n in sorted(counts.items())]


def _aggregate_tok_s(results: list[TaskResult], wall_s: float) -> float | None:
    tokens = sum((r.completion_tokens or 0) + (r.generate_tokens or 0) for r in results)
    return round(tokens / wall_s, 2) if tokens and wall_s > 0 else None


def summarise(results: list[TaskResult], *, wall_s: float, server_info: dict[str, Any] | None,
              baseline: Mapping[str, str] | None = None) -> ProbeSummary:
    """The cell-level numbers: passed/total, acceptance (and its source), speed, garbage."""
    sources = Counter(r.accept_source for r in results if r.accept_source)
    passed = sum(1 for r in results if r.passed)
    srv_acc = server_accept_length(server_info) if server_info else None
    texts = {r.task_id: r.text for r in results if not r.errors}
    div = garbage.summarise_divergence(texts, baseline) if baseline else None
    acc = _round(_mean([r.accept_length for r in results if r.accept_length is not None]), 4)
    notes = garbage.acceptance_notes(acc, srv_acc, passed, len(results))
    if server_info is None:
        notes.append("no /server_info or /get_server_info: server-wide acceptance unknown")
    tok_s = [v for r in results for v in (r.tok_s, r.generate_tok_s) if v is not None]
    lat = [r.latency_s for r in results if r.latency_s is not None]
    return ProbeSummary(
        passed=passed, total=len(results), accept_length=acc,
        accept_source=sources.most_common(1)[0][0] if sources else "",
        server_accept_length=srv_acc, tok_s=_round(_median(tok_s), 2),
        aggregate_tok_s=_aggregate_tok_s(results, wall_s),
        latency_s=_round(_median(lat), 4), garbage_flags=_garbage_flags(results),
        divergence=div,
        failures=[f"{r.task_id}: {r.reason}" for r in results if not r.passed], notes=notes)
