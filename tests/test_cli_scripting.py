"""What a script relies on (issue 24): `--limit` on every command that takes hosts, `--tasks`
taking ids, N or `all` everywhere, a closed pipe never read as a verdict, the README's exit
codes per command, and a JSON error document on stdout under `--json`."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from probes_util import SglangShapedServer
from testbed_util import free_port

from ddprobe.cli import main
from ddprobe.exitcodes import ExitCode


def _two_hosts(tmp: Path, sshd: object) -> Path:
    """node1 behind the real loopback sshd; other on a port nothing listens on."""
    inv = tmp / "hosts.yaml"
    inv.write_text(f"hosts:\n  node1:\n    host: {sshd.alias}\n"  # type: ignore[attr-defined]
                   f"    python: {sys.executable}\n"
                   f"  other:\n    host: 127.0.0.1\n    port: {free_port()}\n"
                   f"    python: {sys.executable}\n")
    return inv


@pytest.mark.ssh
def test_limit_applies_to_hosts_check(sshd: object, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    inv = _two_hosts(tmp_path, sshd)
    cfg = str(sshd.ssh_config)  # type: ignore[attr-defined]
    code = main(["-i", str(inv), "--ssh-config", cfg, "--limit", "node*", "hosts", "--check",
                 "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert [h["name"] for h in doc["hosts"]] == ["node1"] and code == 0, doc
    assert doc["hosts"][0]["status"] == "ok"
    # without --limit the unreachable host is checked too (exit 4)
    assert main(["-i", str(inv), "--ssh-config", cfg, "hosts", "--check", "--json"]) == 4
    capsys.readouterr()


def test_limit_applies_to_one_host_commands(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts:\n  node1: {}\n  other: {}\n")
    # `facts --host other` under --limit 'node*' selects nothing: refused before any contact
    code = main(["-i", str(inv), "--limit", "node*", "patch", "status", "--host", "other"])
    assert code == int(ExitCode.CONFIG)
    assert "--limit 'node*' leaves none of the hosts of 'other'" in capsys.readouterr().err


@pytest.mark.parametrize("tasks,expect", [
    ("2", ["reverse_words", "is_palindrome"]), ("all", None),
    ("reverse_words,fizzbuzz", ["reverse_words", "fizzbuzz"])])
def test_probe_takes_ids_a_number_or_all(sgl: SglangShapedServer, tasks: str,
                                         expect: list[str] | None,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from ddprobe.probes.coding import load_suite
    code = main(["probe", "--url", sgl.url, "--tasks", tasks, "--json"])
    doc = json.loads(capsys.readouterr().out)
    ids = [r["task_id"] for r in doc["results"]]
    assert code == 0
    assert ids == (expect if expect is not None else [t.id for t in load_suite().tasks])


def test_a_task_count_of_zero_is_a_usage_error(sgl: SglangShapedServer,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--url", sgl.url, "--tasks", "0"]) == int(ExitCode.USAGE)
    assert "--tasks N needs N >= 1" in capsys.readouterr().err
