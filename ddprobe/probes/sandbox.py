"""Run untrusted code (a model's answer) in a contained child process, on the machine that
runs ddprobe (docs/security.md says why there and not on the GPU host).

The untrusted code sees nothing of the user: no home directory, no other users' files, no
/proc of other processes, no network or unix sockets, no terminal, no completion nonce; only a
private, size-limited scratch directory and the interpreter (read-only). Two backends, the
one that ran named first in `SandboxResult.isolation`:

* `bubblewrap` (`bwrap`, Debian package `bubblewrap`), preferred where it is installed and
  works: a new root that holds only /usr (and the /lib, /bin links), the interpreter's prefix,
  a fresh /proc and /dev, and a tmpfs work dir; every namespace unshared; `--die-with-parent`;
  `--new-session` (no TIOCSTI into a terminal); all capabilities dropped.
* `namespaces` (fallback, `_launcher.py`): the same layers built by hand with unshare(2):

* a separate process tree started by `_launcher.py` in new Linux namespaces: network (no
  interface up, so nothing, loopback included, is reachable), pid (everything dies with it),
  mount (all mounts read-only except a size-limited tmpfs work dir; /tmp, /run, /dev/shm
  emptied) and, when not root, a user namespace (the same thing `unshare -rn` does);
  /proc remounted for the new pid namespace, home directories covered by empty tmpfs;
* an unprivileged, unique uid when ddprobe runs as root (RLIMIT_NPROC does not bind root);
* rlimits: CPU seconds, address space, processes, file size, open files, no core dumps;
* a wall-clock timeout that SIGKILLs the launcher's whole process group (and with it the pid
  namespace); a scrubbed environment (no proxies, tokens, SSH agent); stdin is /dev/null;
  stdout/stderr are captured up to a cap and the rest is drained.
"""
from __future__ import annotations

import ast
import asyncio
import dataclasses
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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

PROBE_ERROR_CAP, BWRAP_ERROR_CAP = 200, 300  # chars kept: bwrap probe's stderr, bwrap's error
# Read by path, not importlib.resources: this module must stay importable on its own (stdlib
# only), e.g. by another interpreter running as another user.
_HERE: Final = Path(__file__).resolve().parent
_LAUNCHER_SRC: Final = (_HERE / "_launcher.py").read_text(encoding="utf-8")
_SYSTEM_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
# Sandbox uids when running as root: far above any real or subordinate (subuid) range.
_UID_BASE: Final = 2_000_000_000
_UID_SPAN: Final = 100_000_000
BACKEND_ENV: Final = "DDPROBE_SANDBOX"  # auto (default) | bubblewrap | namespaces
_NONCE_ENV: Final = "DDPROBE_NONCE_FD"


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
                          limits: SandboxLimits = SandboxLimits(),
                          secret: str | None = None) -> SandboxResult:
    """Write `files` into a fresh work dir and run `python -I -S -B *argv` there.

    `secret` (the completion nonce) is never written to a file: the first program reads it
    from the pipe whose number is in $DDPROBE_NONCE_FD and must close it.
    """
    root = os.geteuid() == 0
    spawn = _Spawn(workdir=tempfile.mkdtemp(prefix="ddprobe-sbx-"),
                   uid=_UID_BASE + random.randrange(_UID_SPAN) if root else None,
                   python=_sandbox_python(root))
    try:
        backend, why_not = choose_backend(spawn)
        if backend == "bubblewrap":
            return await _run_bwrap(spawn, dict(files), list(argv), limits, secret)
        res = await _run(spawn, dict(files), list(argv), limits, secret)
        note = why_not or "bubblewrap not used"
        return dataclasses.replace(res, isolation=("namespaces (own launcher)", *res.isolation),
                                   notes=(*res.notes, note))
    finally:
        shutil.rmtree(spawn.workdir, ignore_errors=True)


def _secret_pipe(secret: str | None) -> int | None:
    """The read end of a pipe holding `secret` (written and closed), or None."""
    if secret is None:
        return None
    r, w = os.pipe()
    os.write(w, secret.encode())  # far below the pipe buffer: never blocks
    os.close(w)
    return r


# whether bubblewrap runs here, per (bwrap, as a switched uid or not, interpreter): what the
# probe's outcome depends on. Never the uid itself: a fresh one is drawn for every sandbox run.
_BWRAP_OK: dict[tuple[str, bool, str], str | None] = {}


def local_backend() -> tuple[str, str | None]:
    """The backend a sandbox started now would use here, and why not bubblewrap (or None)."""
    root = os.geteuid() == 0
    spawn = _Spawn(workdir=tempfile.mkdtemp(prefix="ddprobe-sbx-"),
                   uid=_UID_BASE + random.randrange(_UID_SPAN) if root else None,
                   python=_sandbox_python(root))
    try:
        return choose_backend(spawn)
    finally:
        shutil.rmtree(spawn.workdir, ignore_errors=True)


def choose_backend(spawn: _Spawn) -> tuple[str, str | None]:
    """("bubblewrap" | "namespaces", why bubblewrap is not used or None)."""
    want = os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    if want == "namespaces":
        return "namespaces", f"bubblewrap not used: {BACKEND_ENV}=namespaces"
    bwrap = shutil.which("bwrap", path=_SYSTEM_PATH)
    if bwrap is None:
        return "namespaces", "bubblewrap not installed (apt install bubblewrap): own namespaces"
    key = (bwrap, spawn.uid is not None, spawn.python)
    if key not in _BWRAP_OK:
        _BWRAP_OK[key] = _bwrap_probe(bwrap, spawn)
    problem = _BWRAP_OK[key]
    if problem:
        return "namespaces", f"bubblewrap cannot run here ({problem}): own namespaces"
    return "bubblewrap", None


def _bwrap_probe(bwrap: str, spawn: _Spawn) -> str | None:
    argv = [bwrap, *_bwrap_layout(spawn, SandboxLimits()), "--", spawn.python, "-I", "-S",
            "-c", "pass"]
    try:
        cp = subprocess.run(argv, capture_output=True, timeout=20, stdin=subprocess.DEVNULL,
                            **_as_uid(spawn))
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    if cp.returncode != 0:
        err = cp.stderr.decode("utf-8", "replace").strip()
        return err[-PROBE_ERROR_CAP:] or f"exit {cp.returncode}"
    return None


def _as_uid(spawn: _Spawn) -> dict[str, Any]:
    if spawn.uid is None:
        return {}
    return {"user": spawn.uid, "group": spawn.uid, "extra_groups": []}


def _bwrap_layout(spawn: _Spawn, limits: SandboxLimits) -> list[str]:
    """The sandbox's file system: nothing but the system's programs and libraries, the
    interpreter's prefix, /proc and /dev of its own, and the work dir."""
    args = ["--unshare-all", "--unshare-user-try", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    for d in _interpreter_dirs(spawn.python):
        args += ["--ro-bind", d, d]
    # /tmp first: the work dir (a mkdtemp path, usually under /tmp) is mounted on top of it
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(1 << 20), "--tmpfs", "/tmp",
             "--size", str(limits.tmpfs_bytes), "--perms", "0700", "--tmpfs", spawn.workdir,
             "--chdir", spawn.workdir, "--clearenv"]
    return args


def _interpreter_dirs(python: str) -> list[str]:
    """The directories the interpreter needs (its prefix: binary, stdlib, libpython), for the
    ones outside /usr. A prefix under a home directory exposes that prefix, not the home."""
    real = os.path.realpath(python)
    out: list[str] = []
    prefix = os.path.dirname(os.path.dirname(real))
    for d in (prefix,):
        if d and d not in ("/", "/usr") and not d.startswith("/usr/") and os.path.isdir(d):
            out.append(d)
    return out


def _child_env(spawn: _Spawn) -> dict[str, str]:
    return {"PATH": _SYSTEM_PATH, "HOME": spawn.workdir, "TMPDIR": spawn.workdir,
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def _memfd(text: str) -> int:
    fd = os.memfd_create("ddprobe-sbx-file", 0)  # never on any disk
    os.write(fd, text.encode("utf-8", "surrogateescape"))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _bwrap_init(limits: SandboxLimits) -> str:
    """The child's first program: set the rlimits, then exec the interpreter on the argv."""
    lim = {"RLIMIT_CPU": (limits.cpu_s, limits.cpu_s + 1),
           "RLIMIT_AS": (limits.memory_bytes, limits.memory_bytes),
           "RLIMIT_NPROC": (limits.nproc, limits.nproc),
           "RLIMIT_FSIZE": (limits.fsize_bytes, limits.fsize_bytes),
           "RLIMIT_NOFILE": (limits.nofile, limits.nofile), "RLIMIT_CORE": (0, 0)}
    return (f"import os, resource, sys\nfor n, v in {lim!r}.items():\n"
            "    resource.setrlimit(getattr(resource, n), v)\n"
            "os.umask(0o077)\n"
            "os.execv(sys.executable, [sys.executable, '-I', '-S', '-B'] + sys.argv[1:])\n")


def _bwrap_args(spawn: _Spawn, files: dict[str, str], argv: list[str], limits: SandboxLimits,
                secret: str | None, fds: list[int]) -> list[str]:
    """bwrap's argv; the descriptors it must inherit are appended to `fds`."""
    bwrap = shutil.which("bwrap", path=_SYSTEM_PATH) or "bwrap"
    args = [bwrap, *_bwrap_layout(spawn, limits)]
    for name, text in files.items():
        fds.append(_memfd(text))
        args += ["--perms", "0600", "--file", str(fds[-1]), os.path.join(spawn.workdir, name)]
    env = _child_env(spawn)
    nonce_fd = _secret_pipe(secret)
    if nonce_fd is not None:
        fds.append(nonce_fd)
        env[_NONCE_ENV] = str(nonce_fd)
    for k, v in env.items():
        args += ["--setenv", k, v]
    return [*args, "--", spawn.python, "-I", "-S", "-c", _bwrap_init(limits), *argv]


def _bwrap_isolation(spawn: _Spawn, limits: SandboxLimits) -> list[str]:
    iso = ["bubblewrap", "network namespace (no network)", "pid namespace",
           "own /proc (no other processes)",
           "no home, /tmp, /run or /etc: only /usr and the interpreter, read-only",
           f"tmpfs work dir ({limits.tmpfs_bytes >> 20} MiB)", "read-only file system outside "
           "the work dir", "new session (no terminal)", "no capabilities"]
    if spawn.uid is not None:
        iso.append(f"unprivileged uid {spawn.uid}")
    return iso


def _bwrap_exit(rc: int | None) -> tuple[int | None, int | None]:
    """(exit code, signal): bwrap exits with its child's status; a child killed by a signal
    is 128 + signal there."""
    code = rc if rc is not None and 0 <= rc < 128 else None
    sig = (rc - 128) if rc is not None and 128 < rc < 160 else (-rc if rc and rc < 0 else None)
    return code, sig


@dataclasses.dataclass(frozen=True)
class _Finished:
    """What a supervised child left: its captured output and whether it ran out of time."""

    timed_out: bool
    duration_s: float
    stdout: bytes
    stderr: bytes
    truncated: bool


async def _supervise(proc: asyncio.subprocess.Process, limits: SandboxLimits, t0: float,
                     after_exit: Callable[[], Awaitable[None]] | None = None) -> _Finished:
    """Drain the child's output up to the cap, SIGKILL its process group at the timeout, run
    `after_exit`, then collect the output (a descendant still holding a pipe is not waited
    for beyond two seconds)."""
    assert proc.stdout is not None and proc.stderr is not None
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
    if after_exit is not None:
        await after_exit()
    done, _ = await asyncio.wait({out_task, err_task}, timeout=2.0)
    for t in (out_task, err_task):
        if t not in done:
            t.cancel()
    (out, out_cut) = out_task.result() if out_task in done else (b"", True)
    (err, err_cut) = err_task.result() if err_task in done else (b"", True)
    return _Finished(timed_out, duration, out, err, out_cut or err_cut)


async def _run_bwrap(spawn: _Spawn, files: dict[str, str], argv: list[str],
                     limits: SandboxLimits, secret: str | None) -> SandboxResult:
    fds: list[int] = []
    try:
        args = _bwrap_args(spawn, files, argv, limits, secret, fds)
        t0 = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, cwd="/", env={"PATH": _SYSTEM_PATH},
                start_new_session=True, pass_fds=tuple(fds), **_as_uid(spawn))
        except OSError as e:
            return SandboxResult(None, None, False, "", "", 0.0, error=f"cannot start: {e}")
    finally:
        for fd in fds:
            os.close(fd)
    fin = await _supervise(proc, limits, t0)
    code, sig = _bwrap_exit(proc.returncode)
    notes: list[str] = []
    if spawn.uid is None and os.geteuid() == 0:
        notes.append("running as root without a uid switch: RLIMIT_NPROC does not bind root")
    text_err = fin.stderr.decode("utf-8", "replace")
    error = None
    if proc.returncode == 1 and text_err.startswith("bwrap:"):
        error = text_err.strip()[:BWRAP_ERROR_CAP]
    return SandboxResult(
        exit_code=None if fin.timed_out else code, signal=None if fin.timed_out else sig,
        timed_out=fin.timed_out, stdout=fin.stdout.decode("utf-8", "replace"),
        stderr=text_err, duration_s=fin.duration_s,
        isolation=tuple(_bwrap_isolation(spawn, limits)), notes=tuple(notes), error=error,
        truncated=fin.truncated)


def _launcher_config(spawn: _Spawn, files: dict[str, str], argv: list[str],
                     limits: SandboxLimits, env: dict[str, str], status_fd: int
                     ) -> dict[str, Any]:
    return {"workdir": spawn.workdir, "python": spawn.python, "argv": argv, "env": env,
            "uid": spawn.uid, "files": files, "status_fd": status_fd,
            "tmpfs_bytes": limits.tmpfs_bytes,
            "limits": {"cpu_s": limits.cpu_s, "memory_bytes": limits.memory_bytes,
                       "nproc": limits.nproc, "fsize_bytes": limits.fsize_bytes,
                       "nofile": limits.nofile}}


def _launcher_exit(status: dict[str, Any], proc: asyncio.subprocess.Process
                   ) -> tuple[int | None, int | None]:
    """(exit code, signal) as the launcher reported them, else as the launcher itself ended."""
    code, sig = status.get("exit"), status.get("signal")
    rc = proc.returncode
    if code is None and sig is None and rc is not None:
        return (rc if rc >= 0 else None), (-rc if rc < 0 else None)
    return code, sig


async def _run(spawn: _Spawn, files: dict[str, str], argv: list[str],
               limits: SandboxLimits, secret: str | None = None) -> SandboxResult:
    env = _child_env(spawn)
    nonce_fd = _secret_pipe(secret)
    if nonce_fd is not None:
        env[_NONCE_ENV] = str(nonce_fd)
    status_r, status_w = os.pipe()
    cfg = _launcher_config(spawn, files, argv, limits, env, status_w)
    t0 = time.monotonic()
    pass_fds = (status_w,) if nonce_fd is None else (status_w, nonce_fd)
    try:
        # The launcher is stdlib-only (3.8+), so it runs on the sandbox's interpreter too:
        # one interpreter to find, and the system one usually starts fastest.
        proc = await asyncio.create_subprocess_exec(
            spawn.python, "-I", "-S", "-c", _LAUNCHER_SRC, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
            cwd="/", start_new_session=True, pass_fds=pass_fds)
    except OSError as e:
        os.close(status_r)
        os.close(status_w)
        return SandboxResult(None, None, False, "", "", 0.0, error=f"cannot start: {e}")
    finally:
        if nonce_fd is not None:
            os.close(nonce_fd)
    os.close(status_w)
    assert proc.stdin is not None
    proc.stdin.write(repr(cfg).encode())
    proc.stdin.close()
    status: dict[str, Any] = {}

    async def after_exit() -> None:
        status.update(_read_status(status_r))
        if spawn.uid is not None and "pid namespace" not in status.get("isolation", []):
            await asyncio.to_thread(_kill_uid, spawn.uid, spawn.python)

    # Descendants outside a pid namespace may hold the pipes open: _supervise does not wait
    # for them forever.
    fin = await _supervise(proc, limits, t0, after_exit)
    code, sig = _launcher_exit(status, proc)
    return SandboxResult(
        exit_code=None if fin.timed_out else code, signal=None if fin.timed_out else sig,
        timed_out=fin.timed_out, stdout=fin.stdout.decode("utf-8", "replace"),
        stderr=fin.stderr.decode("utf-8", "replace"), duration_s=fin.duration_s,
        isolation=tuple(status.get("isolation", ())), notes=tuple(status.get("notes", ())),
        error=status.get("error"), truncated=fin.truncated)


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


def _read_status(fd: int) -> dict[str, Any]:
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
    merged: dict[str, Any] = {}
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


# The first program in the sandbox, trusted (it runs no untrusted code itself): it reads the
# nonce from a pipe (never a file, an argument or the environment), makes itself undumpable
# (a same-uid process can then neither ptrace it nor read /proc/PID/mem), and runs the
# solution and the tests in a FRESH interpreter (exec: no copy of its memory). It prints the
# nonce only when that interpreter exits 0 after telling, on a pipe of its own, that the last
# test ran. So an answer that exits early (sys.exit(0), os._exit(0)) cannot pass, and no file
# in the sandbox holds the nonce. (An answer written to defeat this on purpose could still
# claim completion, as it could just be correct code: containment, not a hostile server's
# verdict, is what the sandbox guarantees; docs/security.md.)
_HARNESS: Final = (_HERE / "_harness.py").read_text(encoding="utf-8")
# ... which runs this one (the solution, then the tests) and learns from it that the last test ran
_RUNNER: Final = (_HERE / "_testrunner.py").read_text(encoding="utf-8")


async def run_tests_async(solution: str, tests: str, *,
                          limits: SandboxLimits = SandboxLimits()) -> TestRun:
    """Run `tests` (asserts) against `solution` in the sandbox.

    A pass needs exit status 0 AND the random nonce, which only the trusted harness knows and
    prints after the last test ran (see _HARNESS): an answer that calls sys.exit(0) or
    os._exit(0) at import time does not pass.
    """
    nonce = new_nonce()
    res = await run_files_async({"solution.py": solution, "tests.py": tests,
                                 "harness.py": _HARNESS, "runner.py": _RUNNER},
                                ["harness.py"], limits=limits, secret=nonce)
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
