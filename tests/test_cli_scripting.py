"""What a script relies on (issue 24): `--limit` on every command that takes hosts, `--tasks`
taking ids, N or `all` everywhere, a closed pipe never read as a verdict, the README's exit
codes per command, and a JSON error document on stdout under `--json`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
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
    err = capsys.readouterr().err  # the integer rule of ddprobe/intlist.py, at the flag
    assert "'--tasks'" in err and "values must be positive, got 0" in err


DDPROBE = str(Path(sys.executable).with_name("ddprobe"))
OLD_RUN = Path(__file__).parent / "data" / "journal-old-bisect"


def _closed_reader(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`ddprobe ARGS | true`: the reader is gone before ddprobe writes its first byte."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([DDPROBE, *args], stdout=w, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **env}, timeout=120)
    finally:
        os.close(w)


@pytest.mark.parametrize("args", [
    ["report", "journal-old-bisect"], ["report", "journal-old-bisect", "--format", "json"],
    ["report", "journal-old-bisect", "--format", "md"], ["bisect", "log", "journal-old-bisect"],
    ["bisect", "--host", "testbed", "--budgets", "8,16,32,64", "--plan"]])
def test_a_closed_pipe_is_141_never_a_verdict_code(args: list[str], tmp_path: Path) -> None:
    shutil.copytree(OLD_RUN, tmp_path / OLD_RUN.name)
    res = _closed_reader(args, {"DDPROBE_RUNS": str(tmp_path)})
    assert res.returncode == int(ExitCode.CLOSED_PIPE) == 141, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr, res.stderr


def test_head_1_of_a_report_is_the_first_line_and_not_a_failure(tmp_path: Path) -> None:
    shutil.copytree(OLD_RUN, tmp_path / OLD_RUN.name)
    res = subprocess.run(["bash", "-c", f"{DDPROBE} report journal-old-bisect | head -1; "
                          "echo \"rc=${PIPESTATUS[0]}\" >&2"], capture_output=True, text=True,
                         env={**os.environ, "DDPROBE_RUNS": str(tmp_path)}, timeout=120)
    assert res.stdout == "bisect journal-old-bisect\n"
    # all of it fit the pipe before head exited (0), or the rest met a closed pipe (141)
    assert res.stderr.strip().splitlines()[-1] in ("rc=0", "rc=141"), res.stderr


README = Path(__file__).resolve().parents[1] / "README.md"


def _readme_row(code: str) -> str:
    section = README.read_text(encoding="utf-8").split("### Exit codes", 1)[1]
    return next(ln for ln in section.splitlines() if ln.startswith(f"| {code} |"))


@pytest.mark.ssh
def test_cell_outcome_exit_codes_are_the_readme_table(sshd: object, tmp_path: Path, runs: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from bisect_util import TASKS, Site, write_inventory
    site = Site(sshd, tmp_path)  # the seed: b16 crashes (the mask), b32 is garbage
    inv = write_inventory(tmp_path, site)
    g = ["-i", str(inv), "--ssh-config", str(sshd.ssh_config)]  # type: ignore[attr-defined]
    row = _readme_row("8 / 9 / 10 / 11")
    for cmd in ("`run`", "`smoke`", "`classify`", "`server start`"):
        assert cmd in row, row
    assert main([*g, "run", "--host", "gpu", "--budget", "16", "--tasks", TASKS, "--json"]) \
        == int(ExitCode.CRASH) == 8
    cell = json.loads(capsys.readouterr().out)
    assert cell["outcome"] == "crash"
    log = Path(cell["log_path"])
    assert main(["classify", str(log)]) == 8, capsys.readouterr().out
    capsys.readouterr()
    # b64 fails in cuBLAS at graph capture: the start itself crashes
    assert main([*g, "server", "start", "--host", "gpu", "--budget", "64"]) == 8
    capsys.readouterr()
    assert main([*g, "run", "--host", "gpu", "--budget", "32", "--tasks", TASKS]) == \
        int(ExitCode.GARBAGE) == 9
    assert main([*g, "server", "stop", "--host", "gpu"]) == 0
    capsys.readouterr()


def test_every_command_takes_json() -> None:
    import typer

    from ddprobe.cli import get_app
    from ddprobe.cli.helpdoc import decorate, walk
    tree = decorate(typer.main.get_command(get_app()))
    missing = [" ".join(p) for p, c in walk(tree) if not getattr(c, "commands", None)
               and "--json" not in {o for q in c.params for o in q.opts}]
    # `testbed serve` hands every argument to the testbed server (SGLang's launch flags)
    assert missing == ["testbed serve"], missing


@pytest.mark.parametrize("args,code,kind", [
    (["report", "no-such-run", "--json"], 3, "ConfigError"),
    (["facts", "--host", "nosuch", "--json"], 3, "ConfigError"),
    (["bisect", "--host", "testbed", "--budgets", "8", "--bogus", "--json"], 2, "UsageError"),
    (["bisect", "--host", "testbed", "--budgets", "x", "--json", "--exit-protocol", "bisect"],
     128, "UsageError")])
def test_an_error_under_json_is_a_json_document(args: list[str], code: int, kind: str,
                                                tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DDPROBE_RUNS", str(tmp_path))
    assert main(args) == code
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc["error"]["exit_code"] == code and doc["error"]["kind"] == kind, doc
    assert doc["error"]["message"] and "error" in cap.err.lower()


def test_report_json_is_format_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(OLD_RUN, tmp_path / OLD_RUN.name)
    monkeypatch.setenv("DDPROBE_RUNS", str(tmp_path))
    assert main(["report", "journal-old-bisect", "--json"]) == 0
    a = capsys.readouterr().out
    assert main(["report", "journal-old-bisect", "--format", "json"]) == 0
    assert json.loads(a) == json.loads(capsys.readouterr().out)
    assert main(["report", "journal-old-bisect", "--json", "--format", "md"]) == 2
