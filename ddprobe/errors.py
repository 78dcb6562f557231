"""Exception hierarchy. Core code raises these; only the CLI turns them into exit codes."""
from __future__ import annotations

from ddprobe.exitcodes import ExitCode


class DdprobeError(RuntimeError):
    """Base error: its message is shown to the user as one line."""

    exit_code: ExitCode = ExitCode.FAILED


class ConfigError(DdprobeError):
    """Bad configuration: names the file, line and key where known."""

    exit_code = ExitCode.CONFIG

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 key: str | None = None) -> None:
        self.path, self.line, self.key = path, line, key
        where = ""
        if path:
            where = f"{path}:{line}: " if line else f"{path}: "
        if key and key not in message:
            message = f"{message} (key '{key}')"
        super().__init__(where + message)


class UsageError(DdprobeError):
    exit_code = ExitCode.USAGE


class RemoteError(DdprobeError):
    """A remote operation failed for infrastructure reasons (not the server's fault)."""

    exit_code = ExitCode.UNREACHABLE


class UnreachableError(RemoteError):
    pass


class ConnectionLost(UnreachableError):
    """The SSH connection dropped while a cell ran: its result is not a result (retried)."""


class HostGone(UnreachableError):
    """The connection dropped and reconnecting failed within the bounded backoff."""


class HostKeyError(RemoteError):
    pass


class AuthError(UnreachableError):
    """The host answered but refused every key (or there was none to offer)."""


class RemoteTimeout(RemoteError):
    pass


class RemoteCommandError(DdprobeError):
    """A command that had to succeed exited non-zero."""

    def __init__(self, host: str, argv: tuple[str, ...], exit_code: int, stdout: str,
                 stderr: str) -> None:
        self.host, self.argv, self.code = host, argv, exit_code
        self.stdout, self.stderr = stdout, stderr
        cmd = " ".join(argv)
        if len(cmd) > 160:
            cmd = cmd[:157] + "..."
        tail = (stderr.strip() or stdout.strip()).splitlines()[-3:]
        super().__init__(f"{host}: command failed (exit {exit_code}): {cmd}"
                         + (": " + " | ".join(tail) if tail else ""))


class PatchError(DdprobeError):
    exit_code = ExitCode.PATCH


class PatchNotFound(ConfigError, PatchError):
    """A patch name or file that is not there: what the user typed (exit 3, ConfigError's), not
    a patch that failed to apply (13); still a PatchError for the callers that fall back."""


class LockedError(DdprobeError):
    exit_code = ExitCode.LOCKED


class ServerError(DdprobeError):
    exit_code = ExitCode.SERVER


class RefusedError(DdprobeError):
    """The config asks for something the host's installed version does not support."""

    exit_code = ExitCode.REFUSED
