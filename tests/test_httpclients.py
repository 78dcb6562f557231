"""One TLS context per process for every HTTP client ddprobe makes (ddprobe/httpclients.py):
made once, verifying as httpx's own default does, and used by each client."""
from __future__ import annotations

import ssl

from ddprobe import httpclients


def test_clients_share_one_verifying_context() -> None:
    ctx = httpclients.tls_context()
    assert ctx is httpclients.tls_context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    with httpclients.client() as a, httpclients.client(timeout=3.0) as b:
        assert not a.trust_env and not b.trust_env
        for c in (a, b):
            pool = c._transport._pool  # httpx's connection pool holds the context it was given
            assert pool._ssl_context is ctx
