"""A host program's size has no cliff: it travels on stdin (after a size line, before the
request), never as one argv word. Linux refuses a single argument over 128 KiB
(MAX_ARG_STRLEN, E2BIG), on the host's side of SSH too (the whole command is one argument to
the login shell there), so a program over 128 KiB is run here through the local remote and
over the real loopback sshd, with the agent and with one exec channel per command."""
from __future__ import annotations

import errno
import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from ddprobe import remote
from ddprobe.hostside.client import BOOT, call, program_input, program_source
from ddprobe.inventory import Host
from ddprobe.remote import RemoteOptions

MAX_ARG_STRLEN = 32 * 4096  # Linux: one argv word (or the environment string) at most 128 KiB


def _big_program() -> str:
    """The real sources program, grown past 128 KiB by a constant it never reads."""
    src = program_source("sources", "locate")
    pad = "_PADDING = " + repr("p" * (MAX_ARG_STRLEN + 20_000)) + "\n"
    big = src + "\n" + pad
    assert len(big.encode()) > MAX_ARG_STRLEN + 20_000
    return big


# a request that travels beside the program (its extra key is ignored by `locate`)
_REQUEST = {"package": "json", "note": "q" * 50_000}


def _assert_located(res: dict[str, object]) -> None:
    assert res["package"] == "json" and str(res["path"]).endswith("json")
    assert res["python"], res


def test_the_cliff_is_real_here() -> None:
    """The old way (the program as the `-c` word) fails on this machine at that size: the test
    below would catch a return to it."""
    with pytest.raises(OSError) as e:
        subprocess.run([sys.executable, "-c", _big_program(), "locate"], check=False,
                       capture_output=True, timeout=60)
    assert e.value.errno == errno.E2BIG


def test_boot_reads_the_program_then_leaves_the_request_to_it() -> None:
    stdin = program_input(_big_program(), json.dumps(_REQUEST))
    p = subprocess.run([sys.executable, "-c", BOOT, "locate"], input=stdin,
                       capture_output=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout.splitlines()[-1])
    assert doc["ok"] is True, doc
    _assert_located(doc["result"])
    assert len(BOOT) < 200  # the one argv word stays small whatever the program


def test_a_program_over_128_kib_runs_through_the_local_remote(ssh_opts: RemoteOptions) -> None:
    h = Host(name="h", python=sys.executable, transport="local", source="test")
    with remote.connect(h, ssh_opts) as r:
        _assert_located(call(r, "locate", _REQUEST, program="sources", source=_big_program()))


@pytest.mark.ssh
@pytest.mark.parametrize("path", ["agent", "exec-channel"])
def test_a_program_over_128_kib_runs_over_ssh(ssh_opts: RemoteOptions, path: str,
                                              make_host: Callable[..., Host]) -> None:
    h = make_host(package="json")
    with remote.connect(h, ssh_opts) as r:
        if path == "exec-channel":
            r._agent_failed = True  # type: ignore[attr-defined] # the fallback without an agent
        _assert_located(call(r, "locate", _REQUEST, program="sources", source=_big_program()))
        if path == "agent":
            assert r._agent is not None  # type: ignore[attr-defined]
        else:
            assert r._agent is None  # type: ignore[attr-defined]
