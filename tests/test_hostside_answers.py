"""Every host program behind one protocol: the one main loop's answers to a bad request, and
the client's caps and checks on what a host sends back (oversize, malformed, none), for the
programs that came behind the client last (facts, kernel log, preflight). Real programs run
with this interpreter through the local transport; a host that answers badly is a stand-in
interpreter (a script) that ignores the program and prints a fixed answer; one case over sshd."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ddprobe import remote
from ddprobe.cell.kernel_log import recent_xid_lines
from ddprobe.errors import ConfigError, RemoteCommandError, RemoteError, UsageError
from ddprobe.facts import gather_facts
from ddprobe.hostside.client import (
    BOOT,
    PROGRAMS,
    call,
    find_install,
    program_input,
    program_source,
)
from ddprobe.hostside.errors import HostOpError, NoAnswerError
from ddprobe.inventory import Host, ServerSettings
from ddprobe.results import Config
from ddprobe.server.launch import build_launch
from ddprobe.server.preflight import clear_cache, run_preflight

# pyenv's interpreters (PYENV_ROOT where set, as pyenv itself reads it)
PYENV = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")


def _local(python: str | Path = sys.executable, **kw: object) -> Host:
    return Host(name="h", python=str(python), transport="local", source="test",
                **kw)  # type: ignore[arg-type]


def _stand_in(tmp: Path, stdout: str, *, code: int = 0, stderr: str = "") -> Path:
    """An 'interpreter' that reads its stdin and prints `stdout` whatever program it is given."""
    out, err = tmp / "answer.out", tmp / "answer.err"
    out.write_text(stdout)
    err.write_text(stderr)
    py = tmp / "python3"
    py.write_text(f"#!{sys.executable}\nimport sys\nsys.stdin.read()\n"
                  f"sys.stdout.write(open({str(out)!r}).read())\n"
                  f"sys.stderr.write(open({str(err)!r}).read())\nsys.exit({code})\n")
    py.chmod(0o755)
    return py


def _run(program: str, op: str, stdin: str) -> dict[str, object]:
    """The answer line of a program run as a host runs it (python -c BOOT OP; the program,
    then the request, on stdin)."""
    p = subprocess.run([sys.executable, "-c", BOOT, op],
                       input=program_input(program_source(program), stdin).decode(),
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout.splitlines()[-1])
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_one_loop_answers_an_unknown_op_and_a_malformed_request_alike(program: str) -> None:
    for op, stdin in (("no-such-op", "{}"), (next(iter(_first_op(program))), "[1, 2]"),
                      (next(iter(_first_op(program))), "{not json")):
        doc = _run(program, op, stdin)
        assert doc["ok"] is False
        err = doc["error"]
        assert isinstance(err, dict) and err["kind"] == "bad_request", (op, stdin, err)
    unknown = _run(program, "no-such-op", "{}")["error"]
    assert "unknown op 'no-such-op'" in unknown["message"]  # type: ignore[index]


def _first_op(program: str) -> list[str]:
    return {"ops": ["status"], "lock": ["lock"], "sources": ["locate"], "preflight": ["parse"],
            "facts": ["facts"], "kernel_log": ["xid"]}[program]


def test_a_missing_field_is_a_bad_request_not_a_traceback() -> None:
    doc = _run("facts", "facts", "{}")
    assert doc["ok"] is False and doc["error"]["kind"] == "bad_request"  # type: ignore[index]
    assert "package" in doc["error"]["message"]  # type: ignore[index]


def test_a_bad_request_keeps_each_familys_exception(ssh_opts) -> None:
    """The server programs answered an unknown op with `bad_request` (a HostOpError, exit 5),
    the sources program with `usage` (a UsageError, exit 2): one kind now, the same
    exceptions at the client."""
    h = _local()
    with remote.connect(h, ssh_opts) as r:
        with pytest.raises(HostOpError) as e:
            call(r, "no-such-op", {}, program="ops")
        assert e.value.kind == "bad_request" and e.value.exit_code == 5
        with pytest.raises(UsageError, match="unknown op"):
            call(r, "no-such-op", {}, program="sources")


def test_facts_of_this_machine_through_the_client(ssh_opts) -> None:
    h = _local(package="json")
    with remote.connect(h, ssh_opts) as r:
        f = gather_facts(r, h)
    assert f.host == "h" and f.python["path"] and f.cpus and f.cpus > 0
    assert f.install is not None and f.install["name"] == "json" and f.install["source_files"]
    assert f.server["port"] == h.server.port and f.server["listening"] in (True, False)


@pytest.mark.parametrize("answer,match", ids=["text", "list", "int", "unknown", "result",
                                              "oversize"], argvalues=[
    ('{"ok": true, "result": {"hostname": ["a", "list"]}}', "hostname is list"),
    ('{"ok": true, "result": {"gpus": "many"}}', "gpus is not a list"),
    ('{"ok": true, "result": {"cpus": "8"}}', "cpus is str"),
    ('{"ok": true, "result": {"hostname": "x", "rootkit": 1}}', "unknown field"),
    ('{"ok": true, "result": [1, 2]}', "no result object"),
    ('{"ok": true, "result": {"hostname": "%s"}}' % ("x" * (2 << 20)), "over the 1048576"),
])
def test_a_malformed_or_oversize_facts_answer_is_one_clear_error(ssh_opts, tmp_path: Path,
                                                                  answer: str,
                                                                 match: str) -> None:
    h = _local(_stand_in(tmp_path, "stray output\n" + answer + "\n"))
    with remote.connect(h, ssh_opts) as r, pytest.raises(RemoteError, match=match) as e:
        gather_facts(r, h)
    assert e.value.exit_code == 4 and len(str(e.value)) < 400


def test_facts_answer_text_is_cleaned_and_capped(ssh_opts, tmp_path: Path) -> None:
    doc = {"ok": True, "result": {"hostname": "gpu\x1b[31m-a", "os": "o" * 10000,
                                  "gpus": [{"name": "H200\x07", "memory_mib": 143771}],
                                  "packages": {"sglang": "0.5.2"}}}
    h = _local(_stand_in(tmp_path, json.dumps(doc) + "\n"))
    with remote.connect(h, ssh_opts) as r:
        f = gather_facts(r, h)
    assert "\x1b" not in f.hostname and "-a" in f.hostname and len(f.os) <= 4096
    assert "\x07" not in f.gpus[0]["name"] and f.gpus[0]["memory_mib"] == 143771
    assert f.packages == {"sglang": "0.5.2"}


def test_an_interpreter_too_old_for_the_facts_program_keeps_its_message(
        ssh_opts, tmp_path: Path) -> None:
    """A Python 3.6 cannot compile the program (its first line is `from __future__ import
    annotations`): the message names the interpreter, its exit and its last stderr line."""
    py = _stand_in(tmp_path, "", code=1, stderr="  File \"<string>\", line 1\n"
                   "SyntaxError: future feature annotations is not defined\n")
    h = _local(py)
    with remote.connect(h, ssh_opts) as r, pytest.raises(RemoteError) as e:
        gather_facts(r, h)
    msg = str(e.value)
    assert f"cannot run the host's interpreter {str(py)!r} (exit 1)" in msg
    assert msg.endswith("SyntaxError: future feature annotations is not defined")


def test_facts_that_ran_and_printed_no_answer_say_so(ssh_opts, tmp_path: Path) -> None:
    h = _local(_stand_in(tmp_path, "Welcome to the host!\n"))
    with remote.connect(h, ssh_opts) as r, pytest.raises(RemoteError) as e:
        gather_facts(r, h)
    assert str(e.value) == "h: facts program printed no usable JSON: 'Welcome to the host!\\n'"


def test_kernel_log_unusable_answers_read_as_no_kernel_log(ssh_opts, tmp_path: Path) -> None:
    for i, text in enumerate(('{"ok": true, "result": {"source": "dmesg", "lines": ["%s"]}}'
                              % ("x" * (300 << 10)), "no answer at all",
                              '{"ok": false, "error": {"kind": "io", "message": "x"}}')):
        d = tmp_path / str(i)
        d.mkdir()
        h = _local(_stand_in(d, text + "\n"))
        with remote.connect(h, ssh_opts) as r:
            assert recent_xid_lines(r, 60.0) == ("", [])


def test_kernel_log_lines_are_checked_cleaned_and_capped(ssh_opts, tmp_path: Path) -> None:
    lines = [f"NVRM: Xid {i}\x1b[0m " + "y" * 500 for i in range(40)] + [7, None]
    doc = {"ok": True, "result": {"source": "dmesg" * 10, "lines": lines}}
    h = _local(_stand_in(tmp_path, json.dumps(doc) + "\n"))
    with remote.connect(h, ssh_opts) as r:
        source, got = recent_xid_lines(r, 60.0)
    assert source == ("dmesg" * 10)[:20] and len(got) == 18  # the last 20, less two non-texts
    assert all(len(x) <= 300 and "\x1b" not in x for x in got) and "Xid 39" in got[-1]


def test_kernel_log_of_this_machine_names_a_source_or_none(ssh_opts) -> None:
    with remote.connect(_local(), ssh_opts) as r:
        source, lines = recent_xid_lines(r, 60.0)
    assert source in ("", "dmesg", "journalctl") and isinstance(lines, list)


def test_an_oversize_preflight_answer_is_not_run(ssh_opts, tmp_path: Path) -> None:
    clear_cache()
    h = _local(_stand_in(tmp_path, '{"ok": true, "result": {"x": "%s"}}\n' % ("x" * (9 << 20))),
               server=ServerSettings(model_path="m"))
    ln = build_launch(h, Config(budget=8))
    with remote.connect(h, ssh_opts) as r:
        res = run_preflight(r, h, [ln])[0]
    assert res.status == "not_run" and "answer was unusable" in res.message
    assert "over the 8388608" in res.message and res.effective is None


def test_a_silent_preflight_is_not_run_with_its_exit_and_tail(ssh_opts, tmp_path: Path) -> None:
    clear_cache()
    h = _local(_stand_in(tmp_path, "", code=1, stderr="Segmentation fault\n"),
               server=ServerSettings(model_path="m"))
    ln = build_launch(h, Config(budget=8))
    with remote.connect(h, ssh_opts) as r:
        res = run_preflight(r, h, [ln])[0]
    assert res.status == "not_run"
    assert "the preflight program gave no answer (exit 1: Segmentation fault)" in res.message


def test_no_answer_from_a_server_program_is_a_command_error(ssh_opts, tmp_path: Path) -> None:
    h = _local(_stand_in(tmp_path, "", code=3, stderr="killed\n"))
    with remote.connect(h, ssh_opts) as r, pytest.raises(NoAnswerError) as e:
        call(r, "status", {"state": "/nonexistent"}, program="ops")
    assert isinstance(e.value, RemoteCommandError) and e.value.code == 3
    assert "<ddprobe server helper> status" in str(e.value) and "killed" in str(e.value)


@pytest.mark.ssh
def test_malformed_facts_over_ssh(ssh_opts, make_host: Callable[..., Host], tmp_path: Path) -> None:
    h = make_host(python=_stand_in(tmp_path, '{"ok": true, "result": {"cpus": true}}\n'))
    with remote.connect(h, ssh_opts) as r, pytest.raises(RemoteError, match="cpus is bool"):
        gather_facts(r, h)


def test_a_missing_interpreter_stays_a_configuration_error(ssh_opts) -> None:
    h = _local("/nonexistent/python3")
    with remote.connect(h, ssh_opts) as r, pytest.raises(ConfigError, match="key 'python'"):
        gather_facts(r, h)


def _pyenv(minor: str) -> str | None:
    import glob
    found = sorted(glob.glob(str(PYENV / f"versions/3.{minor}.*/bin/python")))
    return found[0] if found else None


def test_facts_run_on_the_oldest_python_and_name_an_older_one(ssh_opts) -> None:
    """Python 3.8 runs the facts program; 3.7 lacks importlib.metadata and 3.6 cannot compile
    `from __future__ import annotations`: both are the message facts gave before it was behind
    the client (the interpreter, its exit, its last stderr line), exit 4."""
    py38, py37, py36 = _pyenv("8"), _pyenv("7"), _pyenv("6")
    if not (py38 and py37 and py36):
        pytest.skip("no pyenv python 3.6/3.7/3.8 on this machine")
    h = _local(py38, package="json")
    with remote.connect(h, ssh_opts) as r:
        f = gather_facts(r, h)
    assert f.python["version"].startswith("3.8.") and f.install and f.install["name"] == "json"
    for py, last in ((py37, "ModuleNotFoundError: No module named 'importlib.metadata'"),
                     (py36, "SyntaxError: future feature annotations is not defined")):
        h = _local(py)
        with remote.connect(h, ssh_opts) as r, pytest.raises(RemoteError) as e:
            gather_facts(r, h)
        assert str(e.value) == f"h: cannot run the host's interpreter {py!r} (exit 1): {last}"
        assert e.value.exit_code == 4


def test_a_malformed_install_record_is_one_clear_error(ssh_opts, tmp_path: Path) -> None:
    """`locate` answers an install record; one without its text fields is refused at the
    client (exit 1), and its text is cleaned."""
    bad = {"ok": True, "result": {"package": "sglang", "path": ["/x"], "site_packages": "/",
                                  "python": "/p"}}
    h = _local(_stand_in(tmp_path, json.dumps(bad) + "\n"))
    with remote.connect(h, ssh_opts) as r, \
            pytest.raises(NoAnswerError, match="no text 'path'") as e:
        find_install(r, h)
    assert e.value.exit_code == 1
    good = dict(bad["result"], path="/site/sgl\x1b]0;x\x07ang", version=None)  # type: ignore[arg-type]
    (tmp_path / "answer.out").write_text(json.dumps({"ok": True, "result": good}) + "\n")
    with remote.connect(h, ssh_opts) as r:
        inst = find_install(r, h)
    assert inst.version is None and "\x1b" not in inst.path and inst.path.startswith("/site/")


@pytest.mark.ssh
def test_kernel_log_over_ssh_reads_the_hosts_dmesg(ssh_opts, make_host: Callable[..., Host],
                                                    tmp_path: Path) -> None:
    """The real program over sshd, with a stand-in `dmesg` first on the host's PATH: the Xid
    line of the window is kept, the old one and the other lines are not."""
    import os
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "dmesg").write_text(
        "#!/bin/sh\n"
        "echo '2020-01-01T00:00:00,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 13, old'\n"
        "echo \"$(date +%Y-%m-%dT%H:%M:%S,%6N%:z) usb 1-1: new device\"\n"
        "echo \"$(date +%Y-%m-%dT%H:%M:%S,%6N%:z) NVRM: Xid (PCI:0000:3b:00): 79, pid=1\"\n")
    (bindir / "dmesg").chmod(0o755)
    h = make_host(env={"PATH": f"{bindir}:{os.environ.get('PATH', '')}"})
    with remote.connect(h, ssh_opts) as r:
        source, lines = recent_xid_lines(r, 120.0)
    assert source == "dmesg" and len(lines) == 1 and "Xid (PCI:0000:3b:00): 79" in lines[0]


def test_which_exceptions_the_one_loop_answers() -> None:
    """A request's missing or mistyped field is `bad_request`; a full disk is `disk`; a file
    that does not decode is no answer at all (not the request's fault: the client reports a
    program without answer, as before the one loop)."""
    import errno

    from ddprobe.hostside.common import OpError, answer_for
    from ddprobe.hostside.patchtext import PatchTextError
    from ddprobe.hostside.sourceops import oserror_kind
    assert answer_for("stop", KeyError("state"))["kind"] == "bad_request"  # type: ignore[index]
    assert answer_for("read", UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")) is None
    assert answer_for("x", RuntimeError("bug")) is None
    full = OSError(errno.ENOSPC, "No space left on device", "/srv/log")
    assert answer_for("start", full) == {"kind": "disk", "errno": errno.ENOSPC,
                                         "message": "start failed: No space left on device: "
                                                    "/srv/log"}
    assert answer_for("apply", full, oserror_kind)["kind"] == "patch"  # type: ignore[index]
    assert answer_for("read", full, oserror_kind)["kind"] == "oserror"  # type: ignore[index]
    assert answer_for("lock", OpError("locked", "held", by="run-1")) == {
        "kind": "locked", "message": "held", "by": "run-1"}
    err = answer_for("apply", PatchTextError("no hunk", path="srt/a.py", hunk=2))
    assert err == {"kind": "patch", "message": "no hunk", "path": "srt/a.py", "hunk": 2}


def test_an_answer_without_a_field_its_caller_reads_is_malformed_not_a_bug(
        ssh_opts, tmp_path: Path) -> None:
    """A host program that answers `ok` with an empty result: the lock's caller reads
    `acquired`. Through the client that is the program's `malformed` answer; through the CLI one
    line naming the host, the program and the field, not ddprobe's internal-error exit."""
    h = _local(_stand_in(tmp_path, '{"ok": true, "result": {}}\n'))
    with remote.connect(h, ssh_opts) as r:
        res = call(r, "lock", {"path": "/nonexistent"}, program="lock")
        assert res == {} and res.get("acquired") is None  # .get stays a plain default
        with pytest.raises(NoAnswerError, match=r"h: the lock program's answer to 'lock' has "
                                                r"no 'acquired'") as e:
            res["acquired"]
        assert e.value.kind == "malformed"
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  h: {{transport: local, python: {h.python}}}\n")
    p = subprocess.run([sys.executable, "-m", "ddprobe", "-i", str(inv), "server", "stop", "-H",
                        "h"], capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode not in (0, 70), (p.returncode, p.stderr)
    assert "has no 'acquired'" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert "internal error" not in p.stderr.lower()
