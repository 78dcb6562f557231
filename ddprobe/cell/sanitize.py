"""A `sanitize` cell: the failing config again, under compute-sanitizer memcheck.

    with connect(host, opts) as r:
        cell = run_sanitize_cell(r, host, Config(budget=16))
        cell.sanitizer   # SanitizerReport.to_dict(): kernel, access, address, allocation
        cell.buffer      # the grep-buffers row whose size is the allocation's, or None

Steps: lock -> build the config's launch with the server module (flags checked as for any cell)
-> prefix it with `compute-sanitizer --tool memcheck --print-limit N` and set
PYTORCH_NO_CUDA_MEMORY_CACHING=1 (under PyTorch's caching allocator an overrun stays inside one
cudaMalloc'ed segment and memcheck sees nothing; see docs/notes/gpu-notes.md) -> restart ->
wait for health -> send ONE request -> let the server die or finish -> stop -> parse the log
(`ddprobe.cell.memcheck.parse_memcheck`) -> name the buffer: the grep-buffers row whose evaluated
size, for the running config, equals the "nearest allocation ... of size N bytes". When a row's
size needs one value grep-buffers cannot know (e.g. the drafter's default draft-token count),
the value that makes the sizes equal is solved for and reported: that is the sizing bug itself.
Failing both, the only buffer grep-buffers flags is named when the failing kernel is the writer
its growing use calls (see `name_buffer`; docs/gpu-results.md shows why this is needed).

Only the `command` manager is supported (the sanitizer must wrap the server's own process).
"""
from __future__ import annotations

import ast
import contextlib
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from ddprobe import httpclients
from ddprobe.cell.classify import Classification, classify_dead, excerpt
from ddprobe.cell.memcheck import SanitizerFinding, SanitizerReport, match_buffer, parse_memcheck
from ddprobe.cell.phases import cell_phases
from ddprobe.cell.restart import Restart, copy_log
from ddprobe.errors import DdprobeError, RemoteCommandError, RemoteError
from ddprobe.hostside.errors import HostOpError
from ddprobe.inventory import Host
from ddprobe.remote import Remote
from ddprobe.results import CellResult, Config, Outcome
from ddprobe.server.caches import RunCaches
from ddprobe.server.launch import Launch
from ddprobe.server.lock import HostLock
from ddprobe.sources import BufferReport, BufferRow, SizingParams, grep_buffers
from ddprobe.sources.bufeval import count_elements, dtype_bytes
from ddprobe.timestamps import utc_stamp_tz

# memcheck prints only the first N errors. On the H200 the first 20 of 474 were all writes of
# one far row, attributed to an unrelated 64 KiB allocation 1.4 MB away; the writes just past
# the undersized buffer (those whose "nearest allocation" is the buffer) came later. Hence more.
PRINT_LIMIT = 1000


def sanitizer_args(print_limit: int = PRINT_LIMIT) -> tuple[str, ...]:
    return ("--tool", "memcheck", "--print-limit", str(print_limit))


SANITIZER_ARGS = sanitizer_args()
NO_CACHING = ("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
SANITIZER_PATHS = ("/usr/local/cuda/bin/compute-sanitizer",
                   "/opt/nvidia/compute-sanitizer/compute-sanitizer")
DEFAULT_PROMPT = ("<|im_start|>user\nWrite a Python function `add(a, b)` that returns the sum of "
                  "a and b.<|im_end|>\n<|im_start|>assistant\n")
_INFRA = (RemoteError, HostOpError, RemoteCommandError, httpx.TransportError)
_TAIL_READS = 64  # peeks after the stop (each up to the manager's cap, 1 MiB for `command`)
_SOLVE_MAX = 1 << 16  # a solved size variable above this is not a plausible explanation


@dataclass(frozen=True)
class SanitizeOptions:
    prompt: str = DEFAULT_PROMPT
    max_new_tokens: int = 32
    request_timeout: float = 900.0  # instrumented kernels are slow
    settle_s: float = 30.0  # after the request: time for a dying server to finish its report
    print_limit: int = PRINT_LIMIT
    health_factor: float = 3.0  # start-up under the sanitizer takes longer than the host's usual


def find_sanitizer(r: Remote, host: Host) -> str | None:
    """compute-sanitizer on the host: on the server's PATH, else in CUDA's usual places."""
    script = ('command -v compute-sanitizer 2>/dev/null && exit 0; for p in "$@"; do '
              '[ -x "$p" ] && { echo "$p"; exit 0; }; done; exit 1')
    res = r.run(["sh", "-c", script, "sh", *SANITIZER_PATHS], timeout=30,
                env={**host.env_dict, **dict(host.server.env)})
    path = res.stdout.strip().splitlines()[0] if res.ok and res.stdout.strip() else ""
    return path or None


def sanitized_launch(launch: Launch, sanitizer: str,
                     args: tuple[str, ...] = SANITIZER_ARGS) -> Launch:
    """The same launch, run under memcheck with PyTorch's caching allocator off."""
    env = tuple(kv for kv in launch.env if kv[0] != NO_CACHING[0]) + (NO_CACHING,)
    notes = launch.notes + (f"under {sanitizer} {' '.join(args)}, "
                            f"{NO_CACHING[0]}={NO_CACHING[1]}",)
    return replace(launch, argv=(sanitizer, *args, *launch.argv), env=env, notes=notes)


# ----- naming the buffer ----------------------------------------------------------------------

def _row_dict(row: BufferRow, nbytes: int | None, budget: int) -> dict[str, Any]:
    return {"attr": row.attr, "file": row.file, "line": row.line, "bytes": nbytes,
            "budget": budget, "shape": row.shape, "resolved": row.resolved, "dtype": row.dtype,
            "flags": list(row.flags)}


def buffer_rows(report: BufferReport, budget: int) -> list[dict[str, Any]]:
    """grep-buffers rows with their size (bytes) at `budget`, as `match_buffer` takes them."""
    out = []
    for row in report.rows:
        if row.status != "found":
            continue
        size = next((s for s in row.sizes if s.budget == budget), None)
        out.append(_row_dict(row, size.bytes if size else None, budget))
    return out


def solve_row(row: BufferRow, env: dict[str, int], nbytes: int) -> tuple[str, int] | None:
    """(name, value) for the single unknown of `row`'s size that makes it `nbytes`, if any."""
    per_el, _ = dtype_bytes(row.dtype, row.allocator)
    if not row.resolved or not per_el or nbytes % per_el:
        return None
    try:
        expr = ast.parse(row.resolved, mode="eval").body
    except SyntaxError:
        return None
    kind = "arange" if row.allocator.rsplit(".", 1)[-1] == "arange" else "dims"
    n, missing = count_elements(expr, kind, env)
    if n is not None or len(missing) != 1 or not missing[0].isidentifier():
        return None
    name, want = missing[0], nbytes // per_el

    def size(v: int) -> int | None:
        return count_elements(expr, kind, {**env, name: v})[0]

    lo, hi = 1, _SOLVE_MAX  # sizes grow with their variables: find the first v reaching `want`
    while lo < hi:
        mid = (lo + hi) // 2
        got = size(mid)
        if got is None:
            return None
        if got < want:
            lo = mid + 1
        else:
            hi = mid
    return (name, lo) if size(lo) == want else None


def name_buffer(san: SanitizerReport, report: BufferReport, params: SizingParams,
                budget: int) -> tuple[dict[str, Any] | None, str]:
    """(the buffer the findings point at, how it was matched), trying in order:

    1. a row whose evaluated size equals a finding's "nearest allocation" (closest first: a
       far-away nearest allocation is memcheck's guess, not the buffer that was written);
    2. a row grep-buffers flags whose size, with its one unknown variable solved for, equals
       it (the solved value is the sizing bug: e.g. 9 draft tokens where 17 run);
    3. no size matches: grep-buffers' only flagged row, when a finding's kernel is the writer
       its growing use calls (weaker: named by the kernel, not by the allocation)."""
    findings = sorted((f for f in san.findings if f.allocation_size is not None),
                      key=lambda f: f.distance if f.distance is not None else 1 << 62)
    flagged = [r for r in report.rows if r.status == "found" and r.flags]
    named = (_by_exact_size(findings, buffer_rows(report, budget))
             or _by_solved_size(findings, flagged, params.env(budget), budget)
             or _by_writer_kernel(san, flagged, budget))
    if named is not None:
        return named
    sizes = sorted({f.allocation_size for f in findings if f.allocation_size is not None})
    if not sizes:
        return None, "no finding gives an allocation size"
    return None, (f"no grep-buffers row evaluates to {', '.join(f'{s:,}' for s in sizes)} bytes"
                  f" at budget {budget}")


_Named = tuple[dict[str, Any], str]


def _by_exact_size(findings: list[SanitizerFinding], rows: list[dict[str, Any]]) -> _Named | None:
    for f in findings:
        hit = match_buffer(f, rows)
        if hit is not None:
            return {**hit, "finding": f.summary}, "exact size"
    return None


def _by_solved_size(findings: list[SanitizerFinding], flagged: list[BufferRow], env: dict[str, int],
                    budget: int) -> _Named | None:
    for f in findings:
        assert f.allocation_size is not None
        found = [(r, v) for r in flagged
                 if (v := solve_row(r, env, f.allocation_size)) is not None]
        if found:
            found.sort(key=lambda c: c[1][1])
            row, (name, value) = found[0]
            d = _row_dict(row, f.allocation_size, budget)
            d.update(finding=f.summary, solved={name: value})
            return d, f"size with {name} = {value}"
    return None


def _by_writer_kernel(san: SanitizerReport, flagged: list[BufferRow],
                      budget: int) -> _Named | None:
    if len(flagged) != 1:
        return None
    row = flagged[0]
    for f in san.findings:
        if _writes_through(f.kernel, row):
            d = _row_dict(row, None, budget)
            near = "" if f.allocation_size is None else (
                f"; memcheck's nearest allocation ({f.allocation_size:,} B, "
                f"{f.distance:,} B {f.direction} it) is not a grep-buffers row")
            d.update(finding=f.summary)
            return d, (f"kernel {f.kernel} is the writer of the only flagged buffer's "
                       f"growing use{near}")
    return None


_KERNEL_SUFFIXES = ("_kernel", "_kernel_impl", "_impl", "Kernel")


def _writes_through(kernel: str, row: BufferRow) -> bool:
    """Does `kernel` (e.g. write_tree_mask_kernel) name a function the row's growing uses
    call (e.g. `write_tree_mask(self.device, self.cuda_graph_custom_mask, ...)`)?"""
    name = kernel.split("(")[0].split("<")[0].rsplit("::", 1)[-1]
    for suffix in _KERNEL_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[:-len(suffix)]
            break
    if len(name) < 4:
        return False
    return any(f"{name}(" in use for use in row.growing_uses)


# ----- the cell -------------------------------------------------------------------------------

def run_sanitize_cell(r: Remote, host: Host, config: Config, *,
                      options: SanitizeOptions = SanitizeOptions(),
                      log_dir: Path | None = None, lock: HostLock | None = None,
                      break_lock: bool = False, health_timeout: float | None = None,
                      sanitizer: str | None = None, sizing: SizingParams | None = None,
                      caches: RunCaches | None = None, **_ignored: Any) -> CellResult:
    """Run `config` once under compute-sanitizer memcheck; kind="sanitize". Raises LockedError
    when another run holds the host; every other failure is in the cell (outcome error)."""
    cell = CellResult(host=host.name, config=config, outcome=Outcome.ERROR, kind="sanitize",
                      started_at=utc_stamp_tz())
    caches = caches if caches is not None else RunCaches()
    lk = lock if lock is not None else HostLock(r, host, break_lock=break_lock, caches=caches)
    t0 = time.perf_counter()
    with lk:
        run = _Run(r, host, config, options, cell, health_timeout, sanitizer, caches)
        try:
            run.steps()
        except _INFRA as e:
            cell.outcome, cell.error = Outcome.ERROR, f"{type(e).__name__}: {e}"
        finally:
            run.stop()  # reads what the server printed while it was stopped
        if run.log:
            _analyse(r, host, config, cell, run.log, sizing, run.server_info)
    cell.timings = {k: round(v, 4) for k, v in {**run.timings(),
                                                "total": time.perf_counter() - t0}.items()}
    t = run.rs.timings
    cell.phases = cell_phases({**t, "probe": run.request_s or 0.0,
                               "stop": t.get("stop", 0.0)}, run.log).to_dict()
    if log_dir is not None and run.log:
        cell.local_log = str(copy_log(run.log, Path(log_dir), host.name, config.key,
                                      kind="sanitize"))
    return cell


class _Run:
    def __init__(self, r: Remote, host: Host, config: Config, opts: SanitizeOptions,
                 cell: CellResult, health_timeout: float | None, sanitizer: str | None,
                 caches: RunCaches) -> None:
        self.r, self.host, self.config, self.opts, self.cell = r, host, config, opts, cell
        timeout = health_timeout if health_timeout is not None else \
            host.server.health_timeout * opts.health_factor
        self.sanitizer = sanitizer
        self.rs = Restart(r, host, config, timeout=timeout, settle_s=opts.settle_s,
                          settle_marker="ERROR SUMMARY", caches=caches)
        self.server_info: dict[str, Any] = {}
        self.request_s: float | None = None

    @property
    def log(self) -> str:
        return self.rs.log

    def timings(self) -> dict[str, float]:
        """The sanitize cell's journal keys: restart, health, request, stop (the final stop)."""
        t = self.rs.timings
        out = {"restart": t.get("restart"), "health": t.get("health"),
               "request": self.request_s, "stop": t.get("cleanup")}
        return {k: v for k, v in out.items() if v is not None}

    def _refusal(self) -> str:
        """Why this host cannot run a sanitize cell ("" when it can)."""
        if self.host.server.manager != "command":
            return (f"sanitize cells need the command manager (host '{self.host.name}' "
                    f"uses {self.host.server.manager})")
        if self.sanitizer is None:
            self.sanitizer = find_sanitizer(self.r, self.host)
        if self.sanitizer is None:
            return f"compute-sanitizer not found on {self.host.name}"
        return ""

    def _wrap(self, launch: Launch) -> Launch:
        assert self.sanitizer is not None
        return sanitized_launch(launch, self.sanitizer, sanitizer_args(self.opts.print_limit))

    def _fail(self, v: Classification) -> None:
        self.cell.outcome, self.cell.signature, self.cell.error = v.outcome, v.signature, v.error

    def steps(self) -> None:
        cell, rs = self.cell, self.rs
        cell.error = self._refusal() or None
        if cell.error:
            return
        rs.wrap = self._wrap
        fail = rs.prepare()
        if fail is None:
            self._record_launch()
            fail = rs.stop_old()
        if fail is not None:
            self._fail(fail.verdict)
            return
        cell.log_path = rs.start().log_path
        with rs.tunnel() as url:
            fail = rs.wait(url)
            if fail is not None:
                self._fail(fail.verdict)
                return
            self.server_info = _server_info(url)
            t = time.perf_counter()
            answered = self._request(url)
            self.request_s = time.perf_counter() - t
            # a failed request: the server is dying and the sanitizer still printing
            alive = rs.settle(2.0 if answered else self.opts.settle_s)
        cell.answered = answered
        if not alive:
            self._fail(classify_dead(self.log, package=self.host.package, during="serving"))
            return
        cell.outcome = Outcome.OK if answered else Outcome.ERROR
        if not answered:
            cell.error = "the request failed but the server stayed up"

    def _record_launch(self) -> None:
        launch, cell = self.rs.launch, self.cell
        assert launch is not None
        cell.launch = list(launch.argv)
        cell.env_names = sorted(k for k, _ in launch.env)  # names only: journaled (values secret)
        cell.notes += list(launch.notes)

    def _request(self, url: str) -> bool:
        body = {"text": self.opts.prompt, "sampling_params": {
            "max_new_tokens": self.opts.max_new_tokens, "temperature": 0.0}}
        try:
            res = httpclients.post(url + "/generate", json=body,
                                   timeout=self.opts.request_timeout)
        except httpx.HTTPError as e:
            self.cell.notes.append(f"request: {type(e).__name__}: {e}")
            return False
        return res.status_code == 200

    def stop(self) -> None:
        """Stop the server, then read what it wrote after our last look: a dying memcheck
        prints its summary and the nearest-allocation lines last. Only infrastructure errors
        are caught (and noted); anything else is a bug and propagates."""
        if not self.rs.started:
            return
        notes = self.cell.notes
        try:
            self.cell.stop = self.rs.stop_server().to_dict()
        except _INFRA as e:
            self.rs.started = False
            notes.append(f"stopping the server failed: {type(e).__name__}: {e}")
        try:
            for _ in range(_TAIL_READS):  # a peek returns at most the manager's cap at once
                if not self.rs.peek().data:
                    break
        except _INFRA as e:
            notes.append(f"the end of the server log could not be read ({type(e).__name__}: "
                         f"{e}); the memcheck report may be incomplete")


def _server_info(url: str) -> dict[str, Any]:
    for path in ("/server_info", "/get_server_info"):
        with contextlib.suppress(httpx.HTTPError, ValueError):
            res = httpclients.get(url + path, timeout=30.0)
            if res.status_code == 200 and isinstance(res.json(), dict):
                return dict(res.json())
    return {}


def sizing_for(host: Host, config: Config, info: dict[str, Any]) -> SizingParams:
    """The running config's sizes: the server's own answer first, then the config and host."""
    def num(key: str) -> int | None:
        v = info.get(key)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    return SizingParams(
        max_bs=num("cuda_graph_max_bs") or config.max_bs or host.server.max_bs,
        budgets=(config.budget,), context_len=num("context_length"),
        topk=num("speculative_eagle_topk") or host.server.topk,
        num_steps=num("speculative_num_steps") or host.server.steps)


def _analyse(r: Remote, host: Host, config: Config, cell: CellResult, log: str,
             sizing: SizingParams | None, info: dict[str, Any]) -> None:
    report = parse_memcheck(log)
    cell.sanitizer = report.to_dict()
    cell.log_excerpt = excerpt(log, cell.signature) if cell.signature else \
        [ln for ln in log.splitlines() if ln.startswith("=")][:25]
    if not report.ran:
        cell.notes.append("no compute-sanitizer banner in the log: did it run?")
    if not report.findings:
        cell.buffer_match = "no out-of-bounds access reported"
        return
    params = sizing or sizing_for(host, config, info)
    cell.sizing = {"max_bs": params.max_bs, "context_len": params.context_len,
                   "budget": config.budget}
    try:
        buffers = grep_buffers(r, host, backend=config.backend or "all", params=params)
    except (DdprobeError, *_INFRA) as e:  # the findings stand without the name: say why
        cell.buffer_match = f"grep-buffers failed: {type(e).__name__}: {e}"
        return
    cell.buffer, cell.buffer_match = name_buffer(report, buffers, params, config.budget)
