"""The SSH transport: one paramiko/fabric connection per host, resolved with `ssh -G`, commands
through the agent (one per connection) or one exec channel each, files through sftp or commands."""
from __future__ import annotations

import base64
import contextlib
import logging
import os
import secrets
import select
import shlex
import threading
import time
from collections.abc import Iterator, Mapping, Sequence

import paramiko
from fabric import Config, Connection

from ddprobe import interrupt
from ddprobe.errors import (
    AuthError,
    HostKeyError,
    RemoteError,
    RemoteTimeout,
    UnreachableError,
)
from ddprobe.inventory import Host
from ddprobe.remote.agent import AGENT_SRC, MAX_REPLY_BYTES, Agent, AgentDead, AgentTimeout
from ddprobe.remote.base import (
    CmdResult,
    Remote,
    RemoteOptions,
    build_command,
    check_env_names,
    decode,
    log_command,
    unframe,
)
from ddprobe.remote.keytrust import (
    HostKeyCheck,
    HostKeyPolicy,
    KnownHosts,
    known_host_name,
    transport_factory,
)
from ddprobe.remote.sshconfig import SshTarget, resolve
from ddprobe.remote.tunnel import forward
from ddprobe.untrusted import last_chars

STDERR_TAIL_CAP = 200  # characters of a failed command's stderr an error quotes

log = logging.getLogger("ddprobe.remote")


class SshRemote(Remote):
    def __init__(self, host: Host, opts: RemoteOptions) -> None:
        self.host = host
        self.opts = opts
        self.target = resolve(host.host or host.name, user=host.user, port=host.port,
                              identity=host.identity_file, config_file=self.opts.ssh_config)
        self._conn: Connection | None = None
        self._gateways: list[Connection] = []
        self._policies: list[HostKeyPolicy] = []
        self._sftp: paramiko.SFTPClient | None = None
        self._sftp_failed = False
        self._agent: Agent | None = None
        self._agent_failed = not self.opts.agent

    # -- connection ------------------------------------------------------------------------
    def _connection(self, t: SshTarget, gateway: Connection | None) -> Connection:
        keys = [k for k in t.identity_files if os.path.isfile(k)]
        known = KnownHosts.load(t.known_hosts_files)
        name = known_host_name(t)
        policy = HostKeyPolicy(HostKeyCheck(
            known, name, t.host_key_alias or t.hostname, t.strict_host_key_checking,
            self.opts.accept_new_host_keys, self.host.name, f"{t.user}@{t.hostname}:{t.port}"))
        self._policies.append(policy)
        ck: dict[str, object] = {
            "key_filename": keys, "look_for_keys": not t.identities_only and not keys,
            "allow_agent": not (t.identities_only and keys), "banner_timeout": 15,
            "auth_timeout": 15, "channel_timeout": 15,
            "transport_factory": transport_factory(known.key_order(name)),
        }
        if t.proxy_command and gateway is None:
            # as ssh runs it: through the shell, its stdin/stdout carrying the connection
            ck["sock"] = paramiko.ProxyCommand(shlex.join(["/bin/sh", "-c",
                                                           "exec " + t.proxy_command]))
        # runtime_ssh_path=None / an empty SSHConfig: we resolved everything with `ssh -G`.
        c = Connection(t.hostname, user=t.user, port=t.port, gateway=gateway,
                       connect_timeout=t.connect_timeout or self.opts.connect_timeout,
                       config=Config(ssh_config=paramiko.SSHConfig()),
                       connect_kwargs=ck)
        # no host keys for paramiko: every server key goes to the policy (keytrust.py)
        c.client.set_missing_host_key_policy(policy)
        return c

    def _gateway(self) -> Connection | None:
        """The last hop of ProxyJump (each hop resolved through ssh config as ssh does)."""
        gateway = None
        for hop in (self.target.proxy_jump or "").split(","):
            if not hop:
                continue
            user, _, rest = hop.rpartition("@")
            hostpart, _, port = rest.partition(":")
            if hostpart.startswith("["):
                hostpart = hostpart.strip("[]")
            ht = resolve(hostpart, user=user or None, port=int(port) if port else None,
                         config_file=self.opts.ssh_config)
            gateway = self._connection(ht, gateway)
            self._gateways.append(gateway)
        return gateway

    def _open(self) -> Connection:
        if self._conn is not None:
            return self._conn
        t = self.target
        conn = self._connection(t, self._gateway())
        try:
            self._handshake(conn, t)
        except BaseException:
            # a refused host key leaves paramiko's transport (and a ProxyCommand) running
            with contextlib.suppress(Exception):
                conn.client.close()
            raise
        transport = conn.transport
        assert transport is not None
        transport.set_keepalive(t.server_alive_interval or self.opts.keepalive)
        self._conn = conn
        return conn

    def _handshake(self, conn: Connection, t: SshTarget) -> None:
        where = f"{t.user}@{t.hostname}:{t.port}"
        try:
            conn.open()
        except paramiko.AuthenticationException as e:
            raise AuthError(f"{self.host.name}: authentication failed for {where}: "
                            f"{e or 'no accepted key'}{self._missing_keys()}") from None
        except paramiko.SSHException as e:
            if "authentication" in str(e).lower():  # "No authentication methods available"
                raise AuthError(f"{self.host.name}: authentication failed for {where}: {e}"
                                f"{self._missing_keys()}") from None
            raise UnreachableError(f"{self.host.name}: ssh to {where} failed: {e}") from None
        except TimeoutError:
            raise UnreachableError(f"{self.host.name}: connection to {where} timed out") from None
        except OSError as e:
            raise UnreachableError(f"{self.host.name}: cannot connect to {where}: "
                                   f"{e.strerror or e}") from None

    def _missing_keys(self) -> str:
        """The inventory's identity_file, when it does not exist (ssh_config's IdentityFile
        defaults name files that usually do not: those are not listed)."""
        f = self.host.identity_file
        if not f or os.path.isfile(os.path.expanduser(f)):
            return ""
        src = f", {self.host.source}" if self.host.source else ""
        return f"; identity_file {f} of host '{self.host.name}' does not exist{src}"

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
        self._conn, self._gateways, self._policies = None, [], []

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
            log_command(log, self.host.name, words, env, "agent", data=data)
            try:
                rc, o, e = agent.call(words, timeout=limit, input=data, env=env,
                                      cwd=self.expand(cwd) if cwd else None)
                res = CmdResult(words, rc, decode(o), decode(e), time.monotonic() - t0)
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
        log_command(log, self.host.name, words, env, data=input)
        t0 = time.monotonic()
        try:
            chan = transport.open_session(timeout=self.opts.connect_timeout)
            chan.exec_command(cmd)
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise UnreachableError(f"{self.host.name}: ssh channel failed: {e}") from None
        writer = _send_input(chan, input.encode() if isinstance(input, str) else input)
        try:
            out, err = self._drain(chan, cmd, limit=limit, deadline=t0 + limit)
            code = self._exit_code(chan, transport, cmd)
        finally:
            chan.close()
            if writer is not None:
                writer.join(timeout=1)
        res = CmdResult(words, code, unframe(decode(out), mark), unframe(decode(err), mark),
                        time.monotonic() - t0)
        return self._checked(res, check)

    def _drain(self, chan: paramiko.Channel, cmd: str, *, limit: float,
               deadline: float) -> tuple[bytes, bytes]:
        """Read stdout and stderr until the command exits, bounded in size and time."""
        out, err = bytearray(), bytearray()
        while True:
            got = _read_ready(chan, out, err)
            if len(out) + len(err) > MAX_REPLY_BYTES:
                raise RemoteError(f"{self.host.name}: {cmd[:80]} sent more than "
                                  f"{MAX_REPLY_BYTES >> 20} MiB of output; not read further")
            if chan.exit_status_ready() and not chan.recv_ready() \
                    and not chan.recv_stderr_ready():
                return bytes(out), bytes(err)
            if chan.closed and not got:
                return bytes(out), bytes(err)
            if time.monotonic() > deadline:
                raise RemoteTimeout(f"{self.host.name}: command timed out after {limit:.0f}s:"
                                    f" {cmd[:120]}")
            if not got:
                select.select([chan], [], [], 0.02)

    def _exit_code(self, chan: paramiko.Channel, transport: paramiko.Transport, cmd: str) -> int:
        code = chan.recv_exit_status()
        if code != -1:
            return code
        if not transport.is_active():
            raise UnreachableError(f"{self.host.name}: ssh connection lost during {cmd[:80]}")
        return 255

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
                                  f"{last_chars(res.stderr.strip(), STDERR_TAIL_CAP)}")
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
                                  f"{last_chars(res.stderr.strip(), STDERR_TAIL_CAP)}")
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
        if any(p.key_changed for p in self._policies):
            raise HostKeyError(f"{self.host.name}: port forwarding is disabled: the host key "
                               f"changed (accepted only under StrictHostKeyChecking no)")
        with forward(transport, remote_port, remote_host) as port:
            yield port


def _send_input(chan: paramiko.Channel, data: bytes | None) -> threading.Thread | None:
    """Send stdin from a thread (a large input must not block reading the output)."""
    if not data:
        chan.shutdown_write()
        return None

    def _write() -> None:
        with contextlib.suppress(OSError, paramiko.SSHException):
            chan.sendall(data)
            chan.shutdown_write()
    writer = threading.Thread(target=_write, daemon=True)
    writer.start()
    return writer


def _read_ready(chan: paramiko.Channel, out: bytearray, err: bytearray) -> bool:
    """Append what the channel has ready on stdout and stderr; True when anything came."""
    got = False
    while chan.recv_ready():
        out += chan.recv(65536)
        got = True
    while chan.recv_stderr_ready():
        err += chan.recv_stderr(65536)
        got = True
    return got
