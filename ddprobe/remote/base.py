"""The base of every transport: the command record, the options, the one place argv becomes
shell text, and the Remote interface the transports implement."""
from __future__ import annotations

import contextlib
import hashlib
import logging
import shlex
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from ddprobe.errors import ConfigError, RemoteCommandError
from ddprobe.inventory import Host, env_name_problem
from ddprobe.untrusted import last_chars

NO_PYTHON_CAP = 120  # characters of the host's stderr when its interpreter cannot run


@dataclass(frozen=True)
class CmdResult:
    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str
    duration: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class RemoteOptions:
    """How to reach hosts (the CLI's --ssh-config, --accept-new-host-keys, --connect-timeout).
    Every connection is opened with one passed explicitly: there is no process default."""

    ssh_config: str | None = None
    accept_new_host_keys: bool = False
    connect_timeout: float = 15.0
    command_timeout: float = 120.0
    keepalive: int = 30
    agent: bool = True  # one command runner alive per connection (ddprobe/remote/agent.py)


def build_command(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                  cwd: str | None = None) -> str:
    """The one place argv becomes shell text: every word quoted."""
    words = [str(a) for a in argv]
    if not words:
        raise ValueError("empty argv")
    check_env_names(env)
    if env:
        words = ["env"] + [f"{k}={v}" for k, v in env.items()] + words
    if cwd:
        words = ["sh", "-c", 'cd -- "$1" || exit 125; shift; exec "$@"', "sh", cwd] + words
    return shlex.join(words)


# A host program travels on stdin (a size line, then that many bytes of UTF-8 text), read and
# run as the __main__ module by this fixed `python -c` word, leaving the rest of stdin (the
# request) to its main loop. Only `sys` is left in the program's globals beside its own names.
BOOT = ("import sys; exec(compile(sys.stdin.buffer.read(int(sys.stdin.buffer.readline())), "
        "'<ddprobe program>', 'exec'))")


def program_input(source: str, request: str) -> bytes:
    """What a host program's stdin carries: its size line, its text, then the request (JSON)."""
    src = source.encode("utf-8")
    return b"%d\n" % len(src) + src + request.encode("utf-8")


def _stdin_program(argv: Sequence[str], data: str | bytes | None) -> str | None:
    """The program text a `python -c BOOT` command reads from `data`, else None."""
    if BOOT not in argv or data is None:
        return None
    raw = data.encode() if isinstance(data, str) else data
    head, _, rest = raw.partition(b"\n")
    if not head.isdigit():
        return None
    return rest[:int(head)].decode("utf-8", "replace")


PROGRAMS_LOG = "ddprobe-programs"  # -vvv (and --debug): the host programs' text in full
_LONG_WORD = 160


def log_command(log: logging.Logger, where: str, argv: Sequence[str],
                env: Mapping[str, str] | None, how: str = "",
                data: str | bytes | None = None) -> None:
    """One debug line per command run on a host (-v): a shipped host program (a long or
    multi-line `python -c` word, or the program BOOT reads from the command's stdin `data`) is
    shown as its size and digest, its text goes to the PROGRAMS_LOG logger (-vvv). The rest of
    stdin (the request) is never logged. Environment values may be secrets: their names only."""
    if not log.isEnabledFor(logging.DEBUG):
        return
    stdin_prog = _stdin_program(argv, data)
    words, progs = [], []
    for w in argv:
        if w == BOOT and stdin_prog is not None:
            w = stdin_prog
        if len(w) > _LONG_WORD or "\n" in w:
            digest = hashlib.sha256(w.encode()).hexdigest()[:12]
            words.append(f"<program: {w.count(chr(10)) + 1} lines, sha256 {digest}>")
            progs.append((digest, w))
        else:
            words.append(shlex.quote(w))
    log.debug("%s: running %s (%senv: %s)", where, " ".join(words), f"{how}; " if how else "",
              ",".join(env or {}) or "-")
    plog = logging.getLogger(PROGRAMS_LOG)
    for digest, text in progs:
        plog.debug("%s: program sha256 %s:\n%s", where, digest, text)


def check_env_names(env: Mapping[str, str] | None) -> None:
    """Refuse a name `env`/execve would misread (an option, a second assignment, NUL) before
    anything reaches the host; inventories and --env are checked earlier with file:line."""
    for k in env or {}:
        why = env_name_problem(str(k))
        if why:
            raise ConfigError(f"environment: {why}")


class Remote:
    """Base class: `run` is implemented by the transports, the rest is built on it."""

    host: Host

    def run(self, argv: Sequence[str], *, timeout: float | None = None, check: bool = False,
            input: str | bytes | None = None, env: Mapping[str, str] | None = None,
            cwd: str | None = None) -> CmdResult:
        raise NotImplementedError

    def python(self, args: Sequence[str], *, timeout: float | None = None, check: bool = False,
               input: str | bytes | None = None, env: Mapping[str, str] | None = None,
               cwd: str | None = None) -> CmdResult:
        """Run the host's interpreter (host.python) with the host's environment."""
        e = dict(self.host.env)
        e.update(env or {})
        res = self.run([self.host.python, *args], timeout=timeout, check=False, input=input,
                       env=e, cwd=cwd)
        if res.exit_code in (126, 127) and self.host.python in res.stderr and \
                any(w in res.stderr for w in ("not found", "No such file", "ermission denied")):
            # a configuration error (exit 3), not an unreachable host (issue 15)
            where = self.host.source if ":" in self.host.source else None
            path, _, line = (where or "").rpartition(":")
            raise ConfigError(f"{self.host.name}: the host's interpreter {self.host.python!r} "
                              f"(key 'python') cannot be run there "
                              f"({last_chars(res.stderr.strip(), NO_PYTHON_CAP)}); set "
                              f"`python` to an interpreter path on the host",
                              key="python", path=path or None,
                              line=int(line) if line.isdigit() else None)
        return self._checked(res, check)

    def _checked(self, res: CmdResult, check: bool) -> CmdResult:
        if check and not res.ok:
            raise RemoteCommandError(self.host.name, res.argv, res.exit_code, res.stdout,
                                     res.stderr)
        return res

    @property
    def home(self) -> str:
        if not hasattr(self, "_home"):
            self._home = self.run(["sh", "-c", 'printf %s "$HOME"'], check=True).stdout
        return self._home

    def expand(self, path: str) -> str:
        if path == "~" or path.startswith("~/"):
            return self.home + path[1:]
        return path

    def read_bytes(self, path: str) -> bytes:
        raise NotImplementedError

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8")

    def write_bytes(self, path: str, data: bytes, *, mode: int | None = None) -> None:
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        return self.run(["test", "-e", self.expand(path)]).ok

    @contextlib.contextmanager
    def tunnel(self, remote_port: int, remote_host: str = "127.0.0.1") -> Iterator[int]:
        """A local port that reaches remote_host:remote_port as seen from the host."""
        raise NotImplementedError
        yield 0  # pragma: no cover

    def ping(self) -> float:
        """Round-trip time of one protocol message, no shell started (seconds)."""
        t0 = time.monotonic()
        self.run(["true"], check=True, timeout=15)
        return time.monotonic() - t0

    def close(self) -> None:
        pass

    @property
    def connected(self) -> bool:
        """False once the transport is known to be gone (an SSH drop); local is always up."""
        return True

    def __enter__(self) -> Remote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()



def decode(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def unframe(text: str, mark: str) -> str:
    """The output after the frame line (what came before it is the login shell's)."""
    head, sep, rest = text.partition(mark + "\n")
    return rest if sep else text
