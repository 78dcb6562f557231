"""`ddprobe grep` gives the same hits with ripgrep and with the grep fallback, on every host
kind (local and ssh), whichever of the two the machine has: a host whose PATH has no rg is
made here, and rg is installed for the suite (conftest.ensure_program, .ci/run).

Expected (written first): rg and grep agree hit for hit on real SGLang 0.5.2 sources for a
plain word, a `-F` text with regex metacharacters (the fallback used to fail on every -F:
"conflicting matchers specified"), `-i` with a glob, and a regex using `\\s`/`\\d`/`\\w`
(rg's syntax: grep runs it with -P). `tool=auto` on a PATH without rg is grep; `tool=rg`
there is a usage error naming rg.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ensure_program

from ddprobe import remote
from ddprobe.cli import main
from ddprobe.errors import DdprobeError
from ddprobe.inventory import Host
from ddprobe.sources.grep import grep

pytestmark = pytest.mark.ssh

CASES = [
    {"pattern": "cuda_graph_custom_mask", "subdir": "srt/layers", "context": 2},
    {"pattern": "self.cuda_graph_custom_mask = torch.zeros(", "fixed": True,
         "subdir": "srt/layers/attention"},
    {"pattern": "CUDA_GRAPH_CUSTOM_MASK", "ignore_case": True, "include": ["*backend.py"],
         "subdir": "srt/layers/attention"},
    {"pattern": r"max_bs\s*=\s*\w+\.req_to_token_pool\.size(\s*\*\s*\w+)?$", "subdir": "srt"},
    {"pattern": r"\(\d+,\s*\d+\)", "subdir": "srt/layers/attention", "include": ["*.py"]},
]


@pytest.fixture(scope="module")
def no_rg_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH with grep and nothing else: a host without ripgrep."""
    d = tmp_path_factory.mktemp("no-rg-bin")
    os.symlink(shutil.which("grep") or "/usr/bin/grep", d / "grep")
    return str(d)


@pytest.fixture(params=["local", "ssh"])
def host_kind(request: pytest.FixtureRequest, sglang_venv: Callable[[str], Path]
              ) -> Callable[..., Host]:
    py = str(sglang_venv("0.5.2"))

    def make(env: dict[str, str] | None = None) -> Host:
        if request.param == "local":
            return Host(name="here", host="localhost", python=py, transport="local",
                        env=tuple((env or {}).items()), source="test")
        return request.getfixturevalue("make_host")(python=py, env=env)
    return make


def test_rg_and_grep_agree_on_every_host_kind(ssh_opts, sshd, host_kind: Callable[..., Host],
                                             no_rg_path: str) -> None:
    ensure_program("rg", "ripgrep")
    with_rg, without = host_kind(), host_kind({"PATH": no_rg_path})
    with remote.connect(with_rg, ssh_opts) as r1, remote.connect(without, ssh_opts) as r2:
        for case in CASES:
            a = grep(r1, host=with_rg, tool="rg", **case)  # type: ignore[arg-type]
            b = grep(r2, host=without, **case)  # type: ignore[arg-type]  # auto: no rg there
            assert (a.tool, b.tool) == ("rg", "grep"), case
            assert b.dialect == ("fixed" if case.get("fixed") else "pcre"), case
            assert a.matches, f"the case finds nothing, so it proves nothing: {case}"
            assert a.hits == b.hits, case
        with pytest.raises(DdprobeError, match=r"ripgrep \(rg\) is not on the host's PATH"):
            grep(r2, "x", host=without, tool="rg")
        forced = grep(r1, "cuda_graph_custom_mask", host=with_rg, tool="grep",
                      subdir="srt/layers")
        assert forced.tool == "grep" and forced.matches


def test_cli_fixed_strings_without_ripgrep(make_host, sglang_venv, no_rg_path: str,
                                           tmp_path: Path, sshd,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  nrg:\n    host: {sshd.alias}\n    python: {sglang_venv('0.5.2')}\n"
                   f"    env:\n      PATH: {no_rg_path}\n")
    rc = main(["-i", str(inv), "--ssh-config", str(sshd.ssh_config), "grep", "-F",
               "self.cuda_graph_custom_mask = torch.zeros(", "--host", "nrg"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "srt/layers/attention/triton_backend.py" in out
    assert "(grep, fixed)" in err
    rc = main(["-i", str(inv), "grep", "x", "--host", "nrg", "--tool", "ag"])
    assert rc == 2 and "--tool" in capsys.readouterr().err
