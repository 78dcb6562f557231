"""A tiny command runner kept alive on the host for the whole connection (like Ansible's
pipelining or mitogen): each command is an argv list sent as one JSON line and executed with
execve (no shell at all, so nothing can be re-parsed), its result sent back as one JSON line.

Why: every SSH `exec` starts the user's login shell, and real GPU hosts source heavy rc files
(conda/pyenv init: 100+ ms each time). One agent per connection pays that once.
"""
from __future__ import annotations

import base64
import json
import select
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ddprobe.untrusted import first_chars, last_chars

STDERR_TAIL_CAP = 300  # characters of a dead agent's stderr its error quotes
NOISE_LINE_CAP = 200  # characters kept of each login-shell line before the agent's

if TYPE_CHECKING:  # paramiko is imported by the SSH connection that makes an Agent
    import paramiko

AGENT_SRC = r'''
import base64, json, os, signal, subprocess, sys
out = sys.stdout.buffer
def b64(b):
    return base64.b64encode(b).decode()
nonce = sys.argv[1] if len(sys.argv) > 1 else ""
out.write(json.dumps({"ready": 1, "nonce": nonce}).encode() + b"\n"); out.flush()
for line in sys.stdin.buffer:
    req = json.loads(line)
    env = None
    if req.get("env"):
        env = dict(os.environ); env.update(req["env"])
    data = base64.b64decode(req["input"]) if req.get("input") is not None else None
    res = {"id": req["id"]}
    try:
        p = subprocess.Popen(req["argv"],
                             stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             cwd=req.get("cwd"), start_new_session=True)
        try:
            o, e = p.communicate(data, timeout=req.get("timeout"))
            res.update(rc=p.returncode, out=b64(o), err=b64(e))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.communicate()
            res.update(timeout=1)
    except FileNotFoundError as ex:
        if req.get("cwd") and not os.path.isdir(req["cwd"]):
            msg = "cd: %s: No such file or directory\n" % req["cwd"]
            res.update(rc=125, out="", err=b64(msg.encode()))
        else:
            msg = "%s: command not found\n" % req["argv"][0]
            res.update(rc=127, out="", err=b64(msg.encode()))
    except (NotADirectoryError, PermissionError) as ex:
        res.update(rc=126 if isinstance(ex, PermissionError) else 125, out="",
                   err=b64((str(ex) + "\n").encode()))
    out.write(json.dumps(res).encode() + b"\n"); out.flush()
'''


# One reply (a command's stdout+stderr, base64 in JSON) larger than this is not read on: a
# hostile or broken host cannot make ddprobe buffer gigabytes. Host helpers send KBs to MBs.
MAX_REPLY_BYTES = 128 << 20


NOISE_LIMIT = 1 << 20


def _is_ready(line: bytes, nonce: str) -> bool:
    try:
        doc = json.loads(line)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("ready") == 1 and doc.get("nonce", "") == nonce


class AgentDead(Exception):
    pass


class AgentTimeout(Exception):
    pass


class Agent:
    """Client side: one channel, one request at a time (a lock serialises callers)."""

    def __init__(self, chan: paramiko.Channel, nonce: str = "") -> None:
        import paramiko
        self._ssh_error = paramiko.SSHException
        self.chan = chan
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._n = 0
        self.broken = False
        self._owed: int | None = None  # the id of a reply a Ctrl-C left unread
        self._owed_timeout = 0.0
        self.noise: list[str] = []  # what the login shell printed before the agent started
        deadline = time.monotonic() + 30
        # rc files (an `echo` in ~/.bashrc, conda, `module load`) print before the agent runs:
        # skip every line up to the agent's own ready line, which carries this connection's
        # nonce (issue 15: such noise was a JSONDecodeError on every command)
        size = 0
        while True:
            line = self._readline(deadline=deadline)
            if _is_ready(line, nonce):
                break
            size += len(line)
            if size > NOISE_LIMIT:
                raise AgentDead(f"no agent start within {NOISE_LIMIT} bytes of login-shell output")
            self.noise.append(first_chars(line.decode("utf-8", "replace"), NOISE_LINE_CAP))

    def _readline(self, deadline: float) -> bytes:
        while b"\n" not in self._buf:
            if time.monotonic() > deadline:
                raise AgentTimeout()
            if self.chan.recv_ready():
                chunk = self.chan.recv(1 << 20)
                if not chunk:
                    raise AgentDead(self._stderr())
                self._buf += chunk
                if len(self._buf) > MAX_REPLY_BYTES and b"\n" not in chunk:
                    self.broken = True
                    raise AgentDead(f"the host sent a reply larger than "
                                    f"{MAX_REPLY_BYTES >> 20} MiB; not read further")
                continue
            if self.chan.closed or self.chan.eof_received or self.chan.exit_status_ready():
                raise AgentDead(self._stderr())
            select.select([self.chan], [], [], 0.05)
        i = self._buf.index(b"\n")
        line = bytes(self._buf[:i])
        del self._buf[:i + 1]
        return line

    def _stderr(self) -> str:
        err = b""
        while self.chan.recv_stderr_ready():
            err += self.chan.recv_stderr(65536)
        return last_chars(err.decode(errors="replace").strip(), STDERR_TAIL_CAP) or "agent exited"

    def call(self, argv: Sequence[str], *, timeout: float, input: bytes | None,
             env: Mapping[str, str] | None, cwd: str | None) -> tuple[int, bytes, bytes]:
        with self._lock:
            if self._owed is not None:
                # a Ctrl-C left a reply owed: wait for it first (the command it belongs to,
                # a server start say, has then finished, so a cleanup sees what it did)
                try:
                    self._reply(self._owed, deadline=time.monotonic() + self._owed_timeout)
                except (AgentTimeout, AgentDead):
                    self.broken = True
                    raise AgentDead("the command interrupted by Ctrl-C did not finish") from None
                finally:
                    self._owed = None
            self._n += 1
            req: dict[str, Any] = {"id": self._n, "argv": list(argv), "timeout": timeout,
                                   "env": dict(env) if env else None, "cwd": cwd,
                                   "input": base64.b64encode(input).decode()
                                   if input is not None else None}
            try:
                self.chan.sendall(json.dumps(req).encode() + b"\n")
            except (OSError, self._ssh_error) as e:
                raise AgentDead(str(e)) from None
            except BaseException:
                self.broken = True  # a request cut mid-line: this agent cannot go on
                raise
            try:
                res = self._reply(self._n, deadline=time.monotonic() + timeout + 15)
            except AgentTimeout:
                self.broken = True  # the agent itself missed its own deadline: replace it
                raise
            except KeyboardInterrupt:
                self._owed, self._owed_timeout = self._n, timeout + 15
                raise
            if res.get("timeout"):
                raise AgentTimeout()
            return (int(res["rc"]), base64.b64decode(res["out"] or ""),
                    base64.b64decode(res["err"] or ""))

    def _reply(self, n: int, *, deadline: float) -> dict[str, Any]:
        """The reply to request n (a stale reply to an earlier request is skipped)."""
        while True:
            res = json.loads(self._readline(deadline=deadline))
            if not isinstance(res, dict) or res.get("id", n) >= n:
                return res if isinstance(res, dict) else {}

    def close(self) -> None:
        try:
            self.chan.shutdown_write()
            self.chan.close()
        except Exception:
            pass
