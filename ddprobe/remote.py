"""Remote execution: one connection per host, argv lists only, ssh or local, same interface.

Every command is an argv list joined with shlex quoting at this boundary and nowhere else.
"""
from __future__ import annotations

import base64
import contextlib
import logging
import os
import secrets
import select
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

import paramiko
from fabric import Config, Connection

from ddprobe import interrupt
from ddprobe.agent import AGENT_SRC, MAX_REPLY_BYTES, Agent, AgentDead, AgentTimeout
from ddprobe.errors import (
    ConfigError,
    DdprobeError,
    HostKeyError,
    RemoteCommandError,
    RemoteError,
    RemoteTimeout,
    UnreachableError,
)
from ddprobe.inventory import Host, env_name_problem
from ddprobe.sshconfig import SshTarget, resolve

log = logging.getLogger("ddprobe.remote")
# paramiko logs every refused tunnel channel at ERROR with no handler set: keep stderr clean
logging.getLogger("paramiko").addHandler(logging.NullHandler())
T = TypeVar("T")


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
    ssh_config: str | None = None
    accept_new_host_keys: bool = False
    connect_timeout: float = 15.0
    command_timeout: float = 120.0
    keepalive: int = 30
    agent: bool = True  # keep one command runner alive per connection (see ddprobe/agent.py)


_defaults = RemoteOptions()


def set_default_options(opts: RemoteOptions) -> None:
    """Set by the CLI from --ssh-config / --accept-new-host-keys."""
    global _defaults
    _defaults = opts


def default_options() -> RemoteOptions:
    return _defaults


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
                              f"({res.stderr.strip()[-120:]}); set `python` to an interpreter "
                              f"path on the host",
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


def _decode(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def _unframe(text: str, mark: str) -> str:
    """The output after the frame line (what came before it is the login shell's)."""
    head, sep, rest = text.partition(mark + "\n")
    return rest if sep else text


class LocalRemote(Remote):
    """The local transport: the built-in testbed host, or ddprobe running on the GPU host."""

    def __init__(self, host: Host) -> None:
        self.host = host

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
        log.debug("local: running %s (env: %s)", shlex.join(words), ",".join(env or {}) or "-")
        try:
            proc = subprocess.run(words, input=data, capture_output=True, env=full_env,
                                  cwd=self.expand(cwd) if cwd else None,
                                  timeout=timeout or _defaults.command_timeout,
                                  stdin=None if data is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise RemoteTimeout(f"{self.host.name}: command timed out after "
                                f"{timeout or _defaults.command_timeout:.0f}s: "
                                f"{shlex.join(words)[:120]}") from None
        except FileNotFoundError:
            res = CmdResult(words, 127, "", f"{words[0]}: not found", time.monotonic() - t0)
            return self._checked(res, check)
        except NotADirectoryError:
            res = CmdResult(words, 125, "", f"cd: {cwd}: not a directory", time.monotonic() - t0)
            return self._checked(res, check)
        res = CmdResult(words, proc.returncode, _decode(proc.stdout), _decode(proc.stderr),
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
        p = Path(self.expand(path))
        tmp = p.with_name(f".{p.name}.ddprobe-tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, p)

    @contextlib.contextmanager
    def tunnel(self, remote_port: int, remote_host: str = "127.0.0.1") -> Iterator[int]:
        yield remote_port


class _RecordingPolicy(paramiko.MissingHostKeyPolicy):
    """Accept an unknown key and record it in the known_hosts file in use (explicit opt-in)."""

    def __init__(self, path: str, *, save: bool) -> None:
        self.path, self.save = path, save

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        if self.save:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
            log.info("recorded host key of %s in %s", hostname, self.path)


def _known_host_name(t: SshTarget) -> str:
    return t.hostname if t.port == 22 else f"[{t.hostname}]:{t.port}"


class SshRemote(Remote):
    def __init__(self, host: Host, opts: RemoteOptions | None = None) -> None:
        self.host = host
        self.opts = opts or _defaults
        self.target = resolve(host.host or host.name, user=host.user, port=host.port,
                              identity=host.identity_file, config_file=self.opts.ssh_config)
        self._conn: Connection | None = None
        self._gateways: list[Connection] = []
        self._sftp: paramiko.SFTPClient | None = None
        self._sftp_failed = False
        self._agent: Agent | None = None
        self._agent_failed = not self.opts.agent

    # -- connection ------------------------------------------------------------------------
    def _connection(self, t: SshTarget, gateway: Connection | None) -> Connection:
        keys = [k for k in t.identity_files if os.path.isfile(k)]
        ck: dict[str, object] = {
            "key_filename": keys, "look_for_keys": not t.identities_only and not keys,
            "allow_agent": not (t.identities_only and keys), "banner_timeout": 15,
            "auth_timeout": 15, "channel_timeout": 15,
        }
        # runtime_ssh_path=None / an empty SSHConfig: we resolved everything with `ssh -G`.
        c = Connection(t.hostname, user=t.user, port=t.port, gateway=gateway,
                       connect_timeout=t.connect_timeout or self.opts.connect_timeout,
                       config=Config(ssh_config=paramiko.SSHConfig()),
                       connect_kwargs=ck)
        client = c.client
        for f in t.known_hosts_files:
            if os.path.isfile(f):
                try:
                    client.load_host_keys(f) if f == t.known_hosts_files[0] else \
                        client.get_host_keys().load(f)
                except (OSError, paramiko.SSHException) as e:
                    log.warning("cannot read known_hosts %s: %s", f, e)
        if client._host_keys_filename is None:
            client._host_keys_filename = t.known_hosts_files[0]
        shkc = t.strict_host_key_checking
        if self.opts.accept_new_host_keys or shkc == "accept-new":
            client.set_missing_host_key_policy(_RecordingPolicy(t.known_hosts_files[0], save=True))
        elif shkc == "no":
            client.set_missing_host_key_policy(_RecordingPolicy(t.known_hosts_files[0],
                                                                save=False))
        else:
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        return c

    def _open(self) -> Connection:
        if self._conn is not None:
            return self._conn
        t = self.target
        gateway = None
        if t.proxy_jump:
            for hop in t.proxy_jump.split(","):
                user, _, rest = hop.rpartition("@")
                hostpart, _, port = rest.partition(":")
                if hostpart.startswith("["):
                    hostpart = hostpart.strip("[]")
                ht = resolve(hostpart, user=user or None, port=int(port) if port else None,
                             config_file=self.opts.ssh_config)
                gateway = self._connection(ht, gateway)
                self._gateways.append(gateway)
        conn = self._connection(t, gateway)
        where = f"{t.user}@{t.hostname}:{t.port}"
        try:
            conn.open()
        except paramiko.BadHostKeyException as e:
            raise HostKeyError(
                f"{self.host.name}: HOST KEY CHANGED for {where} (got {e.key.get_name()} "
                f"{e.key.get_fingerprint().hex()}); refusing to connect. If the host was "
                f"rebuilt, remove its old entry from {t.known_hosts_files[0]} "
                f"(ssh-keygen -R '{_known_host_name(t)}') and retry with "
                f"--accept-new-host-keys") from None
        except paramiko.SSHException as e:
            msg = str(e)
            if "not found in known_hosts" in msg:
                raise HostKeyError(
                    f"{self.host.name}: unknown host key for {where} (not in "
                    f"{', '.join(t.known_hosts_files)}); check the fingerprint, then re-run with "
                    f"--accept-new-host-keys to record it") from None
            if isinstance(e, paramiko.AuthenticationException):
                raise UnreachableError(f"{self.host.name}: authentication failed for {where}: "
                                       f"{msg or 'no accepted key'}") from None
            raise UnreachableError(f"{self.host.name}: ssh to {where} failed: {msg}") from None
        except TimeoutError:
            raise UnreachableError(f"{self.host.name}: connection to {where} timed out") from None
        except OSError as e:
            raise UnreachableError(f"{self.host.name}: cannot connect to {where}: "
                                   f"{e.strerror or e}") from None
        transport = conn.transport
        assert transport is not None
        transport.set_keepalive(t.server_alive_interval or self.opts.keepalive)
        self._conn = conn
        return conn

    def connect(self) -> SshRemote:
        self._open()
        return self

    @property
    def connected(self) -> bool:
        tr = self._conn.transport if self._conn is not None else None
        return tr is not None and tr.is_active()

    def ping(self) -> float:
        # a global request the server must answer (OpenSSH replies "failure" to unknown ones):
        # a true round trip through the authenticated connection, without starting a shell
        transport = self._open().transport
        assert transport is not None
        t0 = time.monotonic()
        transport.global_request("keepalive@openssh.com", wait=True)
        if not transport.is_active():
            raise UnreachableError(f"{self.host.name}: connection dropped")
        return time.monotonic() - t0

    def close(self) -> None:
        if self._agent is not None:
            self._agent.close()
            self._agent = None
        if self._sftp is not None:
            with contextlib.suppress(Exception):
                self._sftp.close()
            self._sftp = None
        for c in [self._conn, *reversed(self._gateways)]:
            if c is not None:
                with contextlib.suppress(Exception):
                    c.close()
        self._conn, self._gateways = None, []

    # -- commands --------------------------------------------------------------------------
    _LAUNCH = ('for p in "$2" python3 python; do if command -v "$p" >/dev/null 2>&1; then '
               'exec "$p" -u -c "$1" "$3"; fi; done; echo "ddprobe: no python for the agent" >&2; '
               'exit 127')

    def _get_agent(self) -> Agent | None:
        if self._agent is not None or self._agent_failed:
            return self._agent
        transport = self._open().transport
        assert transport is not None
        try:
            chan = transport.open_session(timeout=self.opts.connect_timeout)
            nonce = secrets.token_hex(8)
            chan.exec_command(build_command(["sh", "-c", self._LAUNCH, "sh", AGENT_SRC,
                                             self.host.python, nonce]))
            self._agent = Agent(chan, nonce)
            if self._agent.noise:
                log.debug("%s: the login shell printed %d line(s) before the agent started "
                          "(skipped)", self.host.name, len(self._agent.noise))
        except (AgentDead, AgentTimeout, paramiko.SSHException, OSError) as e:
            log.debug("%s: no agent (%s); one exec channel per command", self.host.name, e)
            self._agent_failed = True
        return self._agent

    def run(self, argv: Sequence[str], *, timeout: float | None = None, check: bool = False,
            input: str | bytes | None = None, env: Mapping[str, str] | None = None,
            cwd: str | None = None) -> CmdResult:
        words = tuple(str(a) for a in argv)
        if not words:
            raise ValueError("empty argv")
        check_env_names(env)
        interrupt.checkpoint()
        limit = timeout or self.opts.command_timeout
        if self._agent is not None and self._agent.broken:
            self._agent.close()
            self._agent = None
        agent = self._get_agent()
        if agent is not None:
            data = input.encode() if isinstance(input, str) else input
            t0 = time.monotonic()
            log.debug("%s: running %s (agent; env: %s)", self.host.name, shlex.join(words),
                      ",".join(env or {}) or "-")
            try:
                rc, o, e = agent.call(words, timeout=limit, input=data, env=env,
                                      cwd=self.expand(cwd) if cwd else None)
                res = CmdResult(words, rc, _decode(o), _decode(e), time.monotonic() - t0)
                return self._checked(res, check)
            except AgentTimeout:
                if agent.broken:
                    agent.close()
                    self._agent = None
                raise RemoteTimeout(f"{self.host.name}: command timed out after {limit:.0f}s: "
                                    f"{shlex.join(words)[:120]}") from None
            except AgentDead as ex:
                # never re-run the command: it may have had effects before the agent died
                self._agent, self._agent_failed = None, True
                agent.close()
                tr = self._conn.transport if self._conn else None
                if tr is None or not tr.is_active():
                    raise UnreachableError(f"{self.host.name}: ssh connection lost during "
                                           f"{shlex.join(words)[:80]}") from None
                raise RemoteError(f"{self.host.name}: remote command runner died during "
                                  f"{shlex.join(words)[:80]}: {ex}") from None
        return self._run_exec(words, limit=limit, check=check, input=input, env=env, cwd=cwd)

    def _run_exec(self, words: tuple[str, ...], *, limit: float, check: bool,
                  input: str | bytes | None, env: Mapping[str, str] | None,
                  cwd: str | None) -> CmdResult:
        # a frame line on stdout and stderr: what the login shell's rc files print before it
        # is not the command's output (issue 15)
        mark = f"--ddprobe-{secrets.token_hex(8)}--"
        cmd = build_command(["sh", "-c", 'printf "%s\\n" "$0"; printf "%s\\n" "$0" >&2; '
                             'exec "$@"', mark, *words], env=env, cwd=cwd)
        conn = self._open()
        transport = conn.transport
        if transport is None or not transport.is_active():
            raise UnreachableError(f"{self.host.name}: ssh connection lost")
        # environment values may be secrets (tokens): log their names only
        log.debug("%s: running %s (env: %s)", self.host.name, shlex.join(words),
                  ",".join(env or {}) or "-")
        t0 = time.monotonic()
        try:
            chan = transport.open_session(timeout=self.opts.connect_timeout)
            chan.exec_command(cmd)
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise UnreachableError(f"{self.host.name}: ssh channel failed: {e}") from None
        data = input.encode() if isinstance(input, str) else input
        writer = None
        if data:
            def _write() -> None:
                with contextlib.suppress(OSError, paramiko.SSHException):
                    chan.sendall(data)
                    chan.shutdown_write()
            writer = threading.Thread(target=_write, daemon=True)
            writer.start()
        else:
            chan.shutdown_write()
        out, err = bytearray(), bytearray()
        deadline = t0 + limit
        try:
            while True:
                got = False
                while chan.recv_ready():
                    out += chan.recv(65536)
                    got = True
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                    got = True
                if len(out) + len(err) > MAX_REPLY_BYTES:
                    raise RemoteError(f"{self.host.name}: {cmd[:80]} sent more than "
                                      f"{MAX_REPLY_BYTES >> 20} MiB of output; not read further")
                if chan.exit_status_ready() and not chan.recv_ready() \
                        and not chan.recv_stderr_ready():
                    break
                if chan.closed and not got:
                    break
                if time.monotonic() > deadline:
                    raise RemoteTimeout(f"{self.host.name}: command timed out after {limit:.0f}s:"
                                        f" {cmd[:120]}")
                if not got:
                    select.select([chan], [], [], 0.02)
            code = chan.recv_exit_status()
            if code == -1:
                if not transport.is_active():
                    raise UnreachableError(f"{self.host.name}: ssh connection lost during "
                                           f"{cmd[:80]}")
                code = 255
        finally:
            chan.close()
            if writer is not None:
                writer.join(timeout=1)
        res = CmdResult(words, code, _unframe(_decode(bytes(out)), mark),
                        _unframe(_decode(bytes(err)), mark), time.monotonic() - t0)
        return self._checked(res, check)

    # -- files -----------------------------------------------------------------------------
    def _sftp_client(self) -> paramiko.SFTPClient | None:
        """sftp, or None where it does not work: a login shell that prints breaks the
        sftp-server subsystem ("Garbage packet received"); files then go through commands."""
        if self._sftp is None and not self._sftp_failed:
            try:
                self._sftp = self._open().client.open_sftp()
            except (paramiko.SSHException, paramiko.sftp.SFTPError, EOFError, OSError) as e:
                log.debug("%s: sftp unavailable (%s); files go through commands",
                          self.host.name, e)
                self._sftp_failed = True
        return self._sftp

    def read_bytes(self, path: str) -> bytes:
        sftp = self._sftp_client()
        if sftp is None:
            res = self.run(["base64", "--", self.expand(path)], timeout=300)
            if not res.ok:
                raise RemoteError(f"{self.host.name}: cannot read {path}: "
                                  f"{res.stderr.strip()[-200:]}")
            return base64.b64decode(res.stdout)
        try:
            with sftp.open(self.expand(path), "rb") as fh:
                data = fh.read(MAX_REPLY_BYTES + 1)
        except OSError as e:
            raise RemoteError(f"{self.host.name}: cannot read {path}: {e}") from None
        if len(data) > MAX_REPLY_BYTES:
            raise RemoteError(f"{self.host.name}: {path} is larger than "
                              f"{MAX_REPLY_BYTES >> 20} MiB; not read")
        return data

    def write_bytes(self, path: str, data: bytes, *, mode: int | None = None) -> None:
        p = self.expand(path)
        d, _, name = p.rpartition("/")
        tmp = f"{d}/.{name}.ddprobe-tmp"
        sftp = self._sftp_client()
        if sftp is None:
            script = ('base64 -d > "$1" && { [ -z "$3" ] || chmod "$3" "$1"; } && '
                      'mv -f -- "$1" "$2" || { rm -f -- "$1"; exit 1; }')
            res = self.run(["sh", "-c", script, "sh", tmp, p,
                            "" if mode is None else f"{mode:o}"],
                           input=base64.b64encode(data), timeout=300)
            if not res.ok:
                raise RemoteError(f"{self.host.name}: cannot write {path}: "
                                  f"{res.stderr.strip()[-200:]}")
            return
        try:
            with sftp.open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
            if mode is not None:
                sftp.chmod(tmp, mode)
            sftp.posix_rename(tmp, p)
        except OSError as e:
            raise RemoteError(f"{self.host.name}: cannot write {path}: {e}") from None

    @contextlib.contextmanager
    def tunnel(self, remote_port: int, remote_host: str = "127.0.0.1") -> Iterator[int]:
        transport = self._open().transport
        assert transport is not None
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", 0))
        srv.listen(64)
        stop = threading.Event()

        def pump(a: socket.socket | paramiko.Channel, b: socket.socket | paramiko.Channel) -> None:
            try:
                while not stop.is_set():
                    r, _, _ = select.select([a, b], [], [], 0.1)
                    # paramiko does not wake select() on EOF: look at the channel itself
                    for ch in (a, b):
                        if isinstance(ch, paramiko.Channel) and ch not in r and \
                                (ch.eof_received or ch.closed) and not ch.recv_ready():
                            r.append(ch)
                    for s in r:
                        chunk = s.recv(65536)
                        if not chunk:
                            return
                        (b if s is a else a).sendall(chunk)
            except (OSError, paramiko.SSHException, EOFError):
                return
            finally:
                for x in (a, b):
                    with contextlib.suppress(Exception):
                        x.close()

        def accept() -> None:
            while not stop.is_set():
                try:
                    srv.settimeout(0.5)
                    sock, addr = srv.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                try:
                    ch = transport.open_channel("direct-tcpip", (remote_host, remote_port), addr,
                                                timeout=10)
                except Exception:
                    sock.close()
                    continue
                threading.Thread(target=pump, args=(sock, ch), daemon=True).start()

        th = threading.Thread(target=accept, daemon=True)
        th.start()
        try:
            yield srv.getsockname()[1]
        finally:
            stop.set()
            srv.close()
            th.join(timeout=2)


def connect(host: Host, opts: RemoteOptions | None = None) -> Remote:
    """Open one connection to a host (use as a context manager)."""
    if host.transport == "local":
        return LocalRemote(host)
    return SshRemote(host, opts).connect()


# ----- fan-out ----------------------------------------------------------------------------------


@dataclass
class HostOutcome(Generic[T]):
    host: Host
    status: str  # ok | failed | unreachable | timeout
    value: T | None = None
    error: str | None = None
    duration: float = 0.0
    exc: BaseException | None = field(default=None, repr=False)


class _Deadline(Exception):
    """fan_out's own deadline passed (not a TimeoutError raised by the function)."""


def _result(fut: Future[T], left: float | None) -> T:
    try:
        return fut.result(timeout=left)
    except FutureTimeout:
        # concurrent.futures.TimeoutError is the builtin TimeoutError only from 3.11 on; on
        # 3.10 `except TimeoutError` missed it and a hung host was "failed" (issue 13)
        if fut.done():
            raise  # fn itself raised TimeoutError
        raise _Deadline() from None


def fan_out(hosts: Sequence[Host], fn: Callable[[Host], T], *, max_workers: int = 8,
            deadline: float | None = None) -> list[HostOutcome[T]]:
    """Run fn(host) on many hosts in parallel, bounded, with a per-host deadline. A host's failure
    never stops the others (unlike fabric's ThreadingGroup: unbounded threads, no join timeout)."""
    results: list[HostOutcome[T]] = [HostOutcome(h, "timeout") for h in hosts]
    if not hosts:
        return results
    pool = ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(hosts))),
                              thread_name_prefix="ddprobe-host")
    starts: dict[int, float] = {}

    def wrapped(i: int, h: Host) -> T:
        starts[i] = time.monotonic()
        return fn(h)

    futs: list[Future[T]] = [pool.submit(wrapped, i, h) for i, h in enumerate(hosts)]
    t_begin = time.monotonic()
    for i, fut in enumerate(futs):
        try:
            left = None if deadline is None else max(0.0, deadline - (time.monotonic() -
                                                                     starts.get(i, t_begin)))
            val = _result(fut, left)
            results[i] = HostOutcome(hosts[i], "ok", val, duration=time.monotonic() -
                                     starts.get(i, t_begin))
        except _Deadline:
            results[i] = HostOutcome(hosts[i], "timeout", error=f"no answer within {deadline}s",
                                     duration=deadline or 0.0)
        except (RemoteTimeout, TimeoutError) as e:  # fn's own timeout (a socket, a command)
            results[i] = HostOutcome(hosts[i], "timeout", error=str(e) or type(e).__name__,
                                     exc=e, duration=time.monotonic() - starts.get(i, t_begin))
        except RemoteError as e:
            results[i] = HostOutcome(hosts[i], "unreachable", error=str(e), exc=e,
                                     duration=time.monotonic() - starts.get(i, t_begin))
        except DdprobeError as e:
            results[i] = HostOutcome(hosts[i], "failed", error=str(e), exc=e,
                                     duration=time.monotonic() - starts.get(i, t_begin))
        except Exception as e:
            results[i] = HostOutcome(hosts[i], "failed", error=f"{type(e).__name__}: {e}", exc=e,
                                     duration=time.monotonic() - starts.get(i, t_begin))
    pool.shutdown(wait=False, cancel_futures=True)
    return results
