"""A local port forwarded through an SSH transport to a port as seen from the host (the
server's HTTP port): one direct-tcpip channel per accepted connection."""
from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator

import paramiko


@contextlib.contextmanager
def forward(transport: paramiko.Transport, remote_port: int,
            remote_host: str = "127.0.0.1") -> Iterator[int]:
    """Yield a local port that reaches remote_host:remote_port through transport."""
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
