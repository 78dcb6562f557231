"""`ddprobe probe` against a real loopback server: exit codes, JSON, rendering, baselines."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from probes_util import SglangShapedServer

from ddprobe.cli import main
from ddprobe.exitcodes import ExitCode

FEW = "reverse_words,fizzbuzz,flatten"


def test_probe_json_ok(sgl: SglangShapedServer, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["probe", "--url", sgl.url, "--tasks", FEW, "--json"])
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert code == ExitCode.OK
    assert doc["label"] == "coding 3/3" and doc["ok"] is True
    assert doc["summary"]["accept_source"] == "spec_accept_length"
    assert [r["task_id"] for r in doc["results"]] == FEW.split(",")


def test_probe_table_and_failure_exit_code(sgl: SglangShapedServer,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    sgl.behaviour.answer = lambda p: "```python\ndef nope():\n    pass\n```"
    code = main(["probe", "--url", sgl.url, "--tasks", FEW])
    out = capsys.readouterr().out
    assert code == ExitCode.FAILED
    assert "coding 0/3" in out and "FAIL" in out and "NameError" in out


def test_probe_baseline_roundtrip(sgl: SglangShapedServer, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "base.json"
    assert main(["probe", "--url", sgl.url, "--tasks", FEW, "--save-baseline", str(base),
                 "--json"]) == ExitCode.OK
    saved = json.loads(base.read_text())
    assert set(saved["texts"]) == set(FEW.split(","))
    capsys.readouterr()
    normal = sgl.default_answer
    sgl.behaviour.answer = lambda p: normal(p).replace("Here is", "Here's")
    code = main(["probe", "--url", sgl.url, "--tasks", FEW, "--baseline", str(base), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == ExitCode.FAILED
    assert doc["summary"]["divergence"].startswith("3/3 answers differ from the baseline")


def test_probe_usage_and_config_errors(sgl: SglangShapedServer, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe"]) == ExitCode.USAGE
    assert "exactly one of --host or --url" in capsys.readouterr().err
    assert main(["probe", "--url", sgl.url, "--suite", "nope"]) == ExitCode.CONFIG
    assert "no suite named 'nope'" in capsys.readouterr().err
    bad = tmp_path / "b.json"
    bad.write_text("[1, 2]")
    assert main(["probe", "--url", sgl.url, "--baseline", str(bad)]) == ExitCode.CONFIG
    err = capsys.readouterr().err
    assert str(bad) in err and "task id -> answer text" in err


def test_probe_unreachable_server_is_a_server_error(sgl: SglangShapedServer,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    url = sgl.url
    sgl.stop()
    sgl.httpd = _Stopped()  # type: ignore[assignment]
    code = main(["probe", "--url", url, "--tasks", FEW, "--timeout", "5"])
    err = capsys.readouterr().err
    assert code == ExitCode.SERVER
    assert "no answer to any probe" in err and "Traceback" not in err


def test_probe_as_a_real_subprocess(sgl: SglangShapedServer) -> None:
    cp = subprocess.run([sys.executable, "-m", "ddprobe", "probe", "--url", sgl.url, "--tasks",
                         "two_sum", "--concurrency", "2", "--json"], capture_output=True,
                        text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["label"] == "coding 1/1"


class _Stopped:
    def shutdown(self) -> None:
        pass

    def server_close(self) -> None:
        pass


def test_probe_host_local_transport_uses_the_inventory_port(
        sgl: SglangShapedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = sgl.url.rsplit(":", 1)[1]
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  box:\n    transport: local\n    server:\n      port: {port}\n"
                   "      bind: 0.0.0.0\n")
    code = main(["--inventory", str(inv), "probe", "--host", "box", "--tasks", FEW, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == ExitCode.OK and doc["base_url"] == f"http://127.0.0.1:{port}"


@pytest.mark.ssh
def test_probe_host_over_ssh_tunnel(sgl: SglangShapedServer, sshd: object, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The server listens on the host's loopback only; ddprobe reaches it through SSH."""
    port = sgl.url.rsplit(":", 1)[1]
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  gpu:\n    host: {sshd.alias}\n"  # type: ignore[attr-defined]
                   f"    server:\n      port: {port}\n")
    code = main(["--inventory", str(inv), "--ssh-config",
                 str(sshd.ssh_config), "probe", "--host", "gpu",  # type: ignore[attr-defined]
                 "--tasks", FEW, "--json"])
    cap = capsys.readouterr()
    assert code == ExitCode.OK, cap.err
    doc = json.loads(cap.out)
    assert doc["label"] == "coding 3/3"
    assert not doc["base_url"].endswith(f":{port}")  # a forwarded local port, not the server's


def test_probe_unknown_host_is_a_config_error(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts:\n  box:\n    transport: local\n")
    assert main(["--inventory", str(inv), "probe", "--host", "nope"]) == ExitCode.CONFIG
    assert "unknown host or group 'nope'" in capsys.readouterr().err
