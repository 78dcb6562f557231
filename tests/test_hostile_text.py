"""Host text never drives the terminal and never breaks a file format (issue 14 items 4, 5).

Expected answers, written before the runs: every hostile string below comes out of `clean`
with no ESC, no C1, no BEL, no CR and no bidi override; printed through ddprobe's console it
is shown as text (never a link, never a MarkupError); a host whose METADATA version carries
markup and an OSC title gets `facts` exit 0 with the text shown literally and no escape byte
on either stream; JUnit/CSV/markdown/JSON written from such text parse with strict parsers.
"""
from __future__ import annotations

import csv
import io
import json
import sys
import xml.etree.ElementTree as ET

import pytest
from rich.text import Text

from ddprobe import untrusted
from ddprobe.cli import main
from ddprobe.safeconsole import make_console

HOSTILE = {
    "osc0_title": "a\x1b]0;pwned title\x07b",
    "osc52_clipboard": "x\x1b]52;c;cm0gLXJmIH4K\x1b\\y",
    "osc8_link": "\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07",
    "csi_colour": "\x1b[31;1mred\x1b[0m",
    "csi_clear": "\x1b[2J\x1b[Hcleared",
    "c1_csi": "\x9b31mc1\x9b0m",
    "c1_osc_unterminated": "\x9d0;title forever",
    "osc_unterminated": "keep\x1b]0;never ends",
    "cr_overwrite": "rm -rf /\rsafe text",
    "bidi": "if admin\u202e } \u2066",
    "bel_bs": "ding\x07\x08\x08",
    "lone_esc": "end\x1b",
    "dcs": "\x1bP+q544e\x1b\\after",
}
BAD = ("\x1b", "\x07", "\x9b", "\x9d", "\r", "\u202e", "\u2066", "\x08")


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_clean_removes_every_control(name):
    out = untrusted.clean(HOSTILE[name])
    assert not any(b in out for b in BAD), repr(out)
    assert untrusted.is_clean(out)


def test_clean_keeps_the_text_around_sequences():
    assert untrusted.clean(HOSTILE["csi_colour"]) == "red"
    assert untrusted.clean(HOSTILE["osc0_title"]) == "ab"
    assert untrusted.clean(HOSTILE["osc_unterminated"]) == "keep"  # payload not leaked
    assert untrusted.clean(HOSTILE["cr_overwrite"]) == "rm -rf /\nsafe text"
    assert untrusted.clean("tab\tand\nnewline") == "tab\tand\nnewline"
    assert untrusted.clean("ünïcødé ✓ 中文") == "ünïcødé ✓ 中文"


def _render(obj, markup_text=None) -> str:
    buf = io.StringIO()
    con = make_console(stderr=False)
    con.file = buf
    con.print(obj)
    return buf.getvalue()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_console_never_emits_host_controls(name):
    # as a str, inside a Text, inside a table: the safety net catches all three
    from rich.table import Table
    t = Table()
    t.add_column("x")
    t.add_row(HOSTILE[name])
    for obj in (HOSTILE[name], Text(HOSTILE[name]), t):
        out = _render(obj)
        assert not any(b in out for b in BAD), repr(out)


def test_console_never_reads_host_markup():
    out = _render("version 0.5.10[/red] [link=https://evil.example]x[/link] [bold]b")
    assert "[/red]" in out and "[link=https://evil.example]" in out and "[bold]" in out


def test_console_keeps_its_own_styles_on_a_terminal():
    from ddprobe.safeconsole import SafeConsole
    buf = io.StringIO()
    con = SafeConsole(file=buf, force_terminal=True, color_system="standard")
    con.print(Text("red", style="red"), Text(HOSTILE["csi_colour"]))
    out = buf.getvalue()
    assert "\x1b[31m" in out  # rich's own style survives
    assert "\x1b[31;1m" not in out  # the host's does not


def test_excerpt_is_bounded_and_says_so():
    big = ("line \x1b[31mred\x1b[0m\n" * 100_000)
    ex = untrusted.excerpt(big, max_chars=2000, max_lines=20)
    assert len(ex) < 2200 and ex.count("\n") <= 21
    assert ex.startswith("[... ") and "left out" in ex and "\x1b" not in ex


def test_first_and_last_chars_bound_a_text_and_change_nothing_else():
    text = "\x1b[31mred\x1b[0m " + "x" * 600
    assert untrusted.first_chars(text, 500) == text[:500] and len(text[:500]) == 500
    assert untrusted.last_chars(text, 200) == text[-200:] and len(text[-200:]) == 200
    assert untrusted.first_chars("short", 500) == "short" == untrusted.last_chars("short", 500)
    # a cap of 0 keeps nothing (a bare `s[-0:]` would keep it all)
    assert untrusted.first_chars(text, 0) == "" == untrusted.last_chars(text, 0)


def test_junit_parses_with_every_illegal_character(tmp_path):
    from ddprobe.report.junit import junit_xml
    from ddprobe.runmodel import SmokeCase
    from ddprobe.smoke import HostSmoke, SmokeReport
    nasty = "".join(chr(c) for c in range(32)) + "\x7f\x9b\ud800\ufffe\uffff" + "".join(
        HOSTILE.values())
    case = SmokeCase(classname="smoke.h", name="probe\x1b]0;t\x07", status="failure",
                     message=nasty, type="garbage", output=nasty)
    hs = HostSmoke(host="h\x1b[31m", cases=[case], properties={"version": nasty})
    rep = SmokeReport(run_id="r", hosts=[hs], wall_s=1.0, run_dir=tmp_path)
    xml = junit_xml(rep)
    root = ET.fromstring(xml)  # raises on any XML 1.0 illegal character
    assert root.find(".//failure") is not None
    path = tmp_path / "smoke.xml"
    path.write_text(xml, encoding="utf-8")
    import subprocess
    if subprocess.run(["which", "xmllint"], capture_output=True).returncode == 0:
        r = subprocess.run(["xmllint", "--noout", str(path)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_csv_and_json_of_hostile_text():
    row = untrusted.for_csv("=HYPERLINK(\"http://evil\")\x1b[31m\nsecond")
    assert row.startswith("'=") and "\n" not in row and "\x1b" not in row
    assert untrusted.for_csv("-1.5") == "-1.5" and untrusted.for_csv(3) == 3
    buf = io.StringIO()
    csv.writer(buf).writerow([row])
    assert next(csv.reader(io.StringIO(buf.getvalue())))[0] == row
    doc = untrusted.dumps_json({"k\udcff": ["bad \udcfe byte", "ok 😀"]})
    doc.encode("utf-8")  # strict UTF-8 round trip
    assert json.loads(doc) == {"k\ufffd": ["bad \ufffd byte", "ok 😀"]}


def test_markdown_of_hostile_text():
    t = untrusted.md_text("<img src=x onerror=alert(1)> | [x](javascript:1) `c`\x1b[31m\nz")
    assert "<img" not in t and "\\|" in t and "\\[x\\]" in t and "\x1b" not in t
    assert "\n" not in t
    code = untrusted.md_code("a``b")
    assert code == "```a``b```"


def test_file_part_never_leaves_a_directory():
    for bad in ("../../..", "..", ".", "/etc/passwd", "a/../../b", "h\x00x", "~root", ""):
        p = untrusted.file_part(bad)
        assert "/" not in p and not p.startswith(".") and p not in ("", ".", "..")
    assert untrusted.file_part("gpu-a") == "gpu-a"
    assert untrusted.file_part("a/b") != untrusted.file_part("a_b")


def _fake_install(tmp_path, version_line: str):
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    di = site / "sglang-0.5.10.dist-info"
    di.mkdir()
    di.joinpath("METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\n{version_line}\n")
    return site


@pytest.mark.ssh
def test_facts_of_a_host_with_hostile_metadata(tmp_path, sshd, capfd):
    site = _fake_install(tmp_path, "Version: 0.5.10[/red]\x1b]0;pwned\x07\x1b]52;c;eA==\x07")
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  gpu-a:\n    python: {sys.executable}\n"
                   f"    env: {{PYTHONPATH: {site}}}\n")
    code = main(["--inventory", str(inv), "--ssh-config", str(sshd.ssh_config), "facts",
                 "--host", "gpu-a"])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "0.5.10[/red]" in out
    assert "\x1b]" not in out + err and "\x07" not in out + err


_WRITE = ("import sys; from ddprobe.cli import server; "
          "server._write(sys.argv[1].encode().decode('unicode_escape'))")


def _write_in_a_process(text: str, *, on_a_terminal: bool) -> bytes:
    """`server logs` writes one piece of a host's log in a real second process whose stdout is
    a real terminal (a pty) or a real pipe; what reached the other end, byte for byte."""
    import os
    import pty
    import subprocess
    arg = text.encode("unicode_escape").decode()
    if not on_a_terminal:
        return subprocess.run([sys.executable, "-c", _WRITE, arg], capture_output=True,
                              check=True, timeout=60).stdout
    master, slave = pty.openpty()
    try:
        import termios
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.OPOST  # no \n -> \r\n on the way out: compare bytes as written
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        proc = subprocess.Popen([sys.executable, "-c", _WRITE, arg], stdout=slave,
                                stderr=subprocess.PIPE)
        os.close(slave)
        slave = -1
        got = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the writer closed its end
                break
            if not chunk:
                break
            got += chunk
        assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
        return got
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)


def test_server_logs_on_a_terminal_are_cleaned():
    # on a terminal its escape sequences are removed (a clipboard write here)
    assert _write_in_a_process("boot \x1b]52;c;cm0K\x07ok\n", on_a_terminal=True) == b"boot ok\n"
    # into a pipe or a file: the log byte for byte
    assert _write_in_a_process("raw \x1b[31mred\n", on_a_terminal=False) == b"raw \x1b[31mred\n"


def test_failing_test_reason_is_cleaned_and_bounded(tmp_path):
    import sys as _sys
    from pathlib import Path as _P
    _sys.path.insert(0, str(_P(__file__).parent))
    import hostile_server

    from ddprobe.probes.runner import run_probes
    payload = "\x1b]0;pwned\x07" + "x" * 5000
    answer = f"```python\nraise RuntimeError({payload!r})\n```\n"
    proc, url = hostile_server.start("answer", answer=answer)
    try:
        rep = run_probes(url, tasks=["fizzbuzz"], accept_tokens=0)
    finally:
        hostile_server.stop(proc)
    r = rep.results[0]
    assert not r.passed and "RuntimeError" in r.reason
    assert len(r.reason) <= 240 and untrusted.is_clean(r.reason)
