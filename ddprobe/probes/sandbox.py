"""Run untrusted code (a model's answer) in a contained child process.

Containment, each layer reported in `SandboxResult.isolation` or, when unavailable, in `notes`:

* a separate process tree started by `_launcher.py` in new Linux namespaces: network (no
  interface up, so nothing, loopback included, is reachable), pid (everything dies with it),
  mount (all mounts read-only except a size-limited tmpfs work dir; /tmp, /run, /dev/shm
  emptied) and, when not root, a user namespace (the same thing `unshare -rn` does);
* an unprivileged, unique uid when ddprobe runs as root (RLIMIT_NPROC does not bind root);
* rlimits: CPU seconds, address space, processes, file size, open files, no core dumps;
* a wall-clock timeout that SIGKILLs the launcher's whole process group (and with it the pid
  namespace); a scrubbed environment (no proxies, tokens, SSH agent); stdin is /dev/null;
  stdout/stderr are captured up to a cap and the rest is drained.
"""
from __future__ import annotations

import ast
import asyncio
import os
import random
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

# Read by path, not importlib.resources: this module must stay importable on its own (stdlib
# only), e.g. by another interpreter running as another user.
_LAUNCHER_SRC: Final = (Path(__file__).resolve().parent / "_launcher.py").read_text(
    encoding="utf-8")
_SYSTEM_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
# Sandbox uids when running as root: far above any real or subordinate (subuid) range.
_UID_BASE: Final = 2_000_000_000
_UID_SPAN: Final = 100_000_000


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 10.0  # wall clock
    cpu_s: int = 10  # RLIMIT_CPU
    memory_bytes: int = 1 << 30  # RLIMIT_AS
    nproc: int = 32  # RLIMIT_NPROC
    fsize_bytes: int = 16 << 20  # RLIMIT_FSIZE
    nofile: int = 256  # RLIMIT_NOFILE
    tmpfs_bytes: int = 64 << 20  # size of the work dir
    output_bytes: int = 64 << 10  # captured per stream; the rest is drained and dropped


@dataclass(frozen=True)
class SandboxResult:
    exit_code: int | None  # the code's exit status (None: killed by a signal, or timed out)
    signal: int | None  # the signal that ended it
    timed_out: bool
    stdout: str
    stderr: str
    duration_s: float
    isolation: tuple[str, ...] = ()  # the layers that were in place
    notes: tuple[str, ...] = ()  # layers that were NOT (say so, never pretend)
    error: str | None = None  # the sandbox could not start the code at all
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and self.error is None

    @property
    def reason(self) -> str:
        """One short line: why the run ended."""
        if self.error:
            return f"sandbox error: {self.error}"
        if self.timed_out:
            return f"timeout after {self.duration_s:.1f}s"
        if self.signal is not None:
            name = _signal_name(self.signal)
            why = {"SIGXCPU": " (CPU limit)", "SIGKILL": " (killed)",
                   "SIGSEGV": " (segfault)", "SIGXFSZ": " (file size limit)"}.get(name, "")
            return f"killed by {name}{why}"
        if self.exit_code == 0:
            return "ok"
        return last_error_line(self.stderr) or f"exit status {self.exit_code}"


@dataclass(frozen=True)
class _Spawn:
    workdir: str
    uid: int | None
    python: str


def run_code(source: str, *, limits: SandboxLimits = SandboxLimits(),
             files: Mapping[str, str] | None = None) -> SandboxResult:
    """Run one Python program (`source`) in the sandbox; blocking convenience wrapper."""
    return asyncio.run(run_code_async(source, limits=limits, files=files))


async def run_code_async(source: str, *, limits: SandboxLimits = SandboxLimits(),
                         files: Mapping[str, str] | None = None,
                         main: str = "main.py") -> SandboxResult:
    all_files = dict(files or {})
    all_files[main] = source
    return await run_files_async(all_files, [main], limits=limits)


async def run_files_async(files: Mapping[str, str], argv: Sequence[str], *,
                          limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Write `files` into a fresh work dir and run `python -I -S -B *argv` there."""
    root = os.geteuid() == 0
    spawn = _Spawn(workdir=tempfile.mkdtemp(prefix="ddprobe-sbx-"),
                   uid=_UID_BASE + random.randrange(_UID_SPAN) if root else None,
                   python=_sandbox_python(root))
    try:
        return await _run(spawn, dict(files), list(argv), limits)
    finally:
        shutil.rmtree(spawn.workdir, ignore_errors=True)


async def _run(spawn: _Spawn, files: dict[str, str], argv: list[str],
               limits: SandboxLimits) -> SandboxResult:
    env = {"PATH": _SYSTEM_PATH, "HOME": spawn.workdir, "TMPDIR": spawn.workdir,
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    status_r, status_w = os.pipe()
    cfg = {"workdir": spawn.workdir, "python": spawn.python, "argv": argv, "env": env,
           "uid": spawn.uid, "files": files, "status_fd": status_w,
           "tmpfs_bytes": limits.tmpfs_bytes,
           "limits": {"cpu_s": limits.cpu_s, "memory_bytes": limits.memory_bytes,
                      "nproc": limits.nproc, "fsize_bytes": limits.fsize_bytes,
                      "nofile": limits.nofile}}
    t0 = time.monotonic()
    try:
        # The launcher is stdlib-only (3.8+), so it runs on the sandbox's interpreter too:
        # one interpreter to find, and the system one usually starts fastest.
        proc = await asyncio.create_subprocess_exec(
            spawn.python, "-I", "-S", "-c", _LAUNCHER_SRC, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
            cwd="/", start_new_session=True, pass_fds=(status_w,))
    except OSError as e:
        os.close(status_r)
        os.close(status_w)
        return SandboxResult(None, None, False, "", "", 0.0, error=f"cannot start: {e}")
    os.close(status_w)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(repr(cfg).encode())
    proc.stdin.close()
    out_task = asyncio.ensure_future(_drain(proc.stdout, limits.output_bytes))
    err_task = asyncio.ensure_future(_drain(proc.stderr, limits.output_bytes))
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), timeout=limits.timeout_s)
    except asyncio.TimeoutError:
        timed_out = True
        _killpg(proc.pid)
        await proc.wait()
    duration = time.monotonic() - t0
    status = _read_status(status_r)
    if spawn.uid is not None and "pid namespace" not in status.get("isolation", []):
        await asyncio.to_thread(_kill_uid, spawn.uid, spawn.python)
    # Descendants outside a pid namespace may hold the pipes open: do not wait for them forever.
    done, _ = await asyncio.wait({out_task, err_task}, timeout=2.0)
    for t in (out_task, err_task):
        if t not in done:
            t.cancel()
    (out, out_cut) = out_task.result() if out_task in done else (b"", True)
    (err, err_cut) = err_task.result() if err_task in done else (b"", True)
    code = status.get("exit")
    sig = status.get("signal")
    if code is None and sig is None and not timed_out and proc.returncode is not None:
        code = proc.returncode if proc.returncode >= 0 else None
        sig = -proc.returncode if proc.returncode < 0 else None
    return SandboxResult(
        exit_code=None if timed_out else code, signal=None if timed_out else sig,
        timed_out=timed_out, stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"), duration_s=duration,
        isolation=tuple(status.get("isolation", ())), notes=tuple(status.get("notes", ())),
        error=status.get("error"), truncated=out_cut or err_cut)


async def _drain(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, bool]:
    buf = bytearray()
    cut = False
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return bytes(buf), cut
        room = cap - len(buf)
        if room > 0:
            buf += chunk[:room]
        if len(chunk) > max(room, 0):
            cut = True


def _read_status(fd: int) -> dict[str, object]:
    """Merge the launcher's status lines (isolation report, then exit/signal/error)."""
    os.set_blocking(fd, False)
    data = b""
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
    except BlockingIOError:
        pass
    finally:
        os.close(fd)
    merged: dict[str, object] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            obj = ast.literal_eval(line)
        except (ValueError, SyntaxError):
            continue
        if isinstance(obj, dict):
            merged.update(obj)
    return merged


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _kill_uid(uid: int, python: str) -> None:
    """Kill every process of a sandbox uid: kill(-1) from that uid reaches exactly those."""
    src = "import os, signal\ntry:\n os.kill(-1, signal.SIGKILL)\nexcept OSError:\n pass"
    subprocess.run([python, "-I", "-S", "-c", src],
                   user=uid, group=uid, extra_groups=[], env={"PATH": _SYSTEM_PATH},
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=10, check=False)


def _sandbox_python(root: bool) -> str:
    """An interpreter the sandbox uid can run: ours if others may exec it, else the system's."""
    ours = os.path.realpath(sys.executable)
    if not root:
        return ours
    for cand in (ours, shutil.which("python3", path=_SYSTEM_PATH)):
        if cand and _others_can_exec(os.path.realpath(cand)):
            return os.path.realpath(cand)
    return ours


def _others_can_exec(path: str) -> bool:
    try:
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        d = os.path.dirname(path)
        while True:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                return False
            parent = os.path.dirname(d)
            if parent == d:
                return True
            d = parent
    except OSError:
        return False


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def last_error_line(stderr: str) -> str:
    """The last non-empty line of stderr (a traceback's exception line), shortened."""
    for line in reversed(stderr.strip().splitlines()):
        if line.strip():
            s = line.strip()
            return s if len(s) <= 200 else s[:197] + "..."
    return ""


def new_nonce() -> str:
    return secrets.token_hex(16)


@dataclass(frozen=True)
class TestRun:
    """The verdict of running a task's tests against a candidate solution."""

    passed: bool
    reason: str  # "ok" or why not: the failing assert, the exception, timeout, limits
    result: SandboxResult
    details: dict[str, str] = field(default_factory=dict)


_HARNESS: Final = '''\
import sys
ns = {"__name__": "solution"}
try:
    exec(compile(open("solution.py", encoding="utf-8").read(), "solution.py", "exec"), ns)
except BaseException as e:
    sys.stderr.write("DDPROBE-FAIL solution: %s: %s\\n" % (type(e).__name__, e))
    raise SystemExit(3)
try:
    exec(compile(open("tests.py", encoding="utf-8").read(), "tests.py", "exec"), ns)
except BaseException as e:
    import traceback  # only on failure: it costs every passing run ~15 ms otherwise
    where = ""
    for fr in traceback.extract_tb(e.__traceback__):
        if fr.filename == "tests.py":
            where = " at tests.py:%d: %s" % (fr.lineno, (fr.line or "").strip())
    sys.stderr.write("DDPROBE-FAIL tests: %s: %s%s\\n" % (type(e).__name__, e, where))
    raise SystemExit(4)
sys.stdout.write("\\n%s\\n" % NONCE)
'''


async def run_tests_async(solution: str, tests: str, *,
                          limits: SandboxLimits = SandboxLimits()) -> TestRun:
    """Run `tests` (asserts) against `solution` in the sandbox.

    A pass needs exit status 0 AND a random nonce printed after the last test, so an answer
    that calls sys.exit(0) or os._exit(0) at import time does not pass.
    """
    nonce = new_nonce()
    harness = _HARNESS.replace("NONCE", repr(nonce))
    res = await run_files_async({"solution.py": solution, "tests.py": tests,
                                 "harness.py": harness}, ["harness.py"], limits=limits)
    if res.ok and nonce in res.stdout.splitlines():
        return TestRun(True, "ok", res)
    marker = [ln for ln in res.stderr.splitlines() if ln.startswith("DDPROBE-FAIL ")]
    if res.ok:
        return TestRun(False, "exited before the tests finished (no completion marker)", res)
    if marker and not res.timed_out and res.signal is None:
        reason = marker[-1][len("DDPROBE-FAIL "):]
    else:
        reason = res.reason
    if len(reason) > 240:
        reason = reason[:237] + "..."
    return TestRun(False, reason, res)


def run_tests(solution: str, tests: str, *, limits: SandboxLimits = SandboxLimits()) -> TestRun:
    return asyncio.run(run_tests_async(solution, tests, limits=limits))
