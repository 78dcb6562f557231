"""HTTP clients for a server's endpoints, sharing one TLS context per process (a leaf).

httpx builds a new `ssl.SSLContext` (loading the CA bundle) for every client it makes, about
60 ms each, also for the plain http:// of a loopback or tunnelled server; a bisect makes one
client per health wait, per probe run and per /server_info read. The context is made once, the
way httpx makes it for a client that does not read the environment (`trust_env=False`: no
proxies, no SSL_CERT_FILE), so verification is what it was.
"""
from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default verifying context, made once (read-only once made)."""
    return httpx.create_ssl_context(trust_env=False)


def client(**kwargs: Any) -> httpx.Client:
    """`httpx.Client(trust_env=False, **kwargs)` with the shared TLS context."""
    return httpx.Client(trust_env=False, verify=tls_context(), **kwargs)


def async_client(**kwargs: Any) -> httpx.AsyncClient:
    """`httpx.AsyncClient(trust_env=False, **kwargs)` with the shared TLS context."""
    return httpx.AsyncClient(trust_env=False, verify=tls_context(), **kwargs)


def get(url: str, **kwargs: Any) -> httpx.Response:
    """`httpx.get(url, trust_env=False, ...)` with the shared TLS context."""
    with client() as c:
        return c.get(url, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    """`httpx.post(url, trust_env=False, ...)` with the shared TLS context."""
    with client() as c:
        return c.post(url, **kwargs)
