"""The inventories shipped in the package (issue 24.4): `ddprobe hosts --example gpu` documents
every key a host entry takes, and `--example testbed` (the README's entry, byte for byte) runs
the testbed on a real SSH host (the loopback sshd) at the testbed's speed."""
from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest
from testbed_util import free_port

from ddprobe.cli import main
from ddprobe.inventory import Host, ServerSettings, load_inventory
from ddprobe.inventory.examples import example_text

README = Path(__file__).resolve().parents[1] / "README.md"


def _keys(text: str) -> set[str]:
    return set(re.findall(r"^\s*#?\s*([a-z_]+):", text, re.M))


def test_the_gpu_example_documents_every_key(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hosts", "--example", "gpu"]) == 0
    text = capsys.readouterr().out
    assert text == example_text("gpu")
    keys = _keys(text)
    host_keys = {f.name for f in dataclasses.fields(Host)} - {"name", "source"}
    server_keys = {f.name for f in dataclasses.fields(ServerSettings)}
    assert not (host_keys | server_keys) - keys, sorted((host_keys | server_keys) - keys)
    (tmp_path / "hosts.yaml").write_text(text)
    inv = load_inventory(str(tmp_path / "hosts.yaml"))
    assert inv.get("b300").server.stall_timeout == 600 and inv.get("b300").server.prepare == ""


def _readme_block_after(marker: str) -> str:
    text = README.read_text(encoding="utf-8")
    tail = text.split(marker, 1)[1]
    return tail.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_the_readme_shows_the_testbed_example_as_shipped() -> None:
    assert _readme_block_after("The testbed runs on an SSH host too") == \
        example_text("testbed")


@pytest.mark.ssh
def test_the_testbed_example_runs_on_an_ssh_host(sshd: object, tmp_path: Path, runs: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # the entry as a user copies it: only the host, the interpreter and the paths are theirs
    text = example_text("testbed")
    text = (text.replace("host: my-cpu-box", f"host: {sshd.alias}")  # type: ignore[attr-defined]
            .replace("python3", sys.executable)
            .replace("/tmp/ddtestbed-site", str(tmp_path / "site"))
            .replace("/tmp/ddtestbed-work", str(tmp_path / "work"))
            .replace("port: 31830", f"port: {free_port()}"))
    inv = tmp_path / "hosts.yaml"
    inv.write_text(text)
    cfg = str(sshd.ssh_config)  # type: ignore[attr-defined]
    code = main(["-i", str(inv), "--ssh-config", cfg, "run", "--host", "testbed-node",
                 "--budget", "8", "--tasks", "2", "--json"])
    cap = capsys.readouterr()
    assert code == 0, cap.err[-3000:]
    doc = json.loads(cap.out)
    assert doc["outcome"] == "ok", doc
    # installed by `prepare: testbed` into the PYTHONPATH entry, started at the testbed's speed
    assert (tmp_path / "site" / "ddtestbed").is_dir()
    assert doc["timings"]["restart"] < 60, doc["timings"]
    # `run` leaves its server running: stop it the way a user does
    assert main(["-i", str(inv), "--ssh-config", cfg, "server", "stop", "--host",
                 "testbed-node"]) == 0
