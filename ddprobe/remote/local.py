"""The local transport: commands run as subprocesses of ddprobe itself."""
from __future__ import annotations

import contextlib
import logging
import os
import shlex
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from ddprobe import interrupt
from ddprobe.errors import RemoteError, RemoteTimeout
from ddprobe.inventory import Host
from ddprobe.remote.base import (
    CmdResult,
    Remote,
    RemoteOptions,
    check_env_names,
    decode,
    log_command,
)

log = logging.getLogger("ddprobe.remote")


class LocalRemote(Remote):
    """The local transport: the built-in testbed host, or ddprobe running on the GPU host.

    Commands start in the home directory, as an SSH login does, never in ddprobe's own working
    directory: `python -m PKG.launch_server` puts its working directory first on sys.path, so a
    server started from a checkout that holds a copy of the package (a clone of ddprobe holds
    ddtestbed/, an SGLang checkout holds sglang/) would import that copy instead of the install
    ddprobe located, analysed and patched, and every verdict would rest on the wrong sources.
    """

    def __init__(self, host: Host, opts: RemoteOptions) -> None:
        self.host, self.opts = host, opts

    def run(self, argv: Sequence[str], *, timeout: float | None = None, check: bool = False,
            input: str | bytes | None = None, env: Mapping[str, str] | None = None,
            cwd: str | None = None) -> CmdResult:
        words = tuple(str(a) for a in argv)
        check_env_names(env)
        interrupt.checkpoint()
        full_env = dict(os.environ)
        full_env.update(env or {})
        data = input.encode() if isinstance(input, str) else input
        t0 = time.monotonic()
        log_command(log, "local", words, env, data=data)
        try:
            proc = subprocess.run(words, input=data, capture_output=True, env=full_env,
                                  cwd=self.expand(cwd) if cwd else self.home,
                                  timeout=timeout or self.opts.command_timeout,
                                  stdin=None if data is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise RemoteTimeout(f"{self.host.name}: command timed out after "
                                f"{timeout or self.opts.command_timeout:.0f}s: "
                                f"{shlex.join(words)[:120]}") from None
        except FileNotFoundError:
            res = CmdResult(words, 127, "", f"{words[0]}: not found", time.monotonic() - t0)
            return self._checked(res, check)
        except NotADirectoryError:
            res = CmdResult(words, 125, "", f"cd: {cwd}: not a directory", time.monotonic() - t0)
            return self._checked(res, check)
        res = CmdResult(words, proc.returncode, decode(proc.stdout), decode(proc.stderr),
                        time.monotonic() - t0)
        return self._checked(res, check)

    @property
    def home(self) -> str:
        return str(Path.home())

    def read_bytes(self, path: str) -> bytes:
        try:
            return Path(self.expand(path)).read_bytes()
        except OSError as e:
            raise RemoteError(f"{self.host.name}: cannot read {path}: {e.strerror}") from None

    def write_bytes(self, path: str, data: bytes, *, mode: int | None = None) -> None:
        _atomic_write(self.expand(path), data, mode)

    @contextlib.contextmanager
    def tunnel(self, remote_port: int, remote_host: str = "127.0.0.1") -> Iterator[int]:
        yield remote_port


def _atomic_write(path: str, data: bytes, mode: int | None) -> None:
    """What the host programs' `sourceio.atomic_write` does, in-process (remote/ sits below
    hostside/ and imports none of it): a temp file beside the target, fsync, the mode, rename,
    fsync the directory; the temp removed on failure."""
    d = os.path.dirname(path) or "."
    tmp = os.path.join(d, f".{os.path.basename(path)}.ddprobe-{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
