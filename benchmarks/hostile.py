"""Benchmark: a fixed set of hostile payloads against ddprobe, and what leaked (target: 0 for
every payload), plus ddprobe's peak memory under a 1 GiB answer (target: < 300 MB).

    python benchmarks/hostile.py            # everything, about a minute
    python benchmarks/hostile.py --quick    # without the `ddprobe run` secrets check

Payload families (expected answer for every row, written before the first run: 0):
  sandbox    model answers that try to read ~/.ssh, the inventory, /proc/*/cmdline, the
             completion nonce, connect to a Docker socket in $HOME, an abstract socket or
             loopback TCP, write the terminal, or fake a pass (tests/hostile_payloads.py, with
             real canaries); each is also run WITHOUT the sandbox to show it really reaches
             its canary ("unsandboxed" column)
  terminal   a hostile SGLang-shaped server (tests/hostile_server.py) whose answers carry OSC
             0/52/8, CSI, C1 and rich markup: escape bytes counted in `ddprobe probe` output
  formats    hostile text (every C0 control, C1, lone surrogates, U+FFFE, markup, HTML,
             formulas) through JUnit, CSV, markdown and JSON: a strict parser must accept each,
             and no raw escape/HTML/formula may survive
  names      inventory host names and env var names that try to leave runs/ or inject options
  secrets    `ddprobe run --env K=<secret>` on the built-in testbed: files holding the value
  memory     `ddprobe probe` peak RSS under a 1 GiB answer (Content-Length, chunked, x4)
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import hostile_payloads  # noqa: E402
import hostile_server  # noqa: E402

from ddprobe import untrusted  # noqa: E402

ROWS: list[tuple[str, str, str, str]] = []  # family, payload, leaked, note
ESC_BYTES = re.compile("[\x1b\x07\x9b\x9d\x90\u202e]")


def row(family: str, payload: str, leaked: int | str, note: str = "") -> None:
    ROWS.append((family, payload, str(leaked), note))


def sandbox_rows() -> None:
    for backend in ("bubblewrap", "namespaces"):
        if backend == "bubblewrap" and not shutil.which("bwrap"):
            row("sandbox", "(all)", "-", "bubblewrap not installed")
            continue
        os.environ["DDPROBE_SANDBOX"] = "auto" if backend == "bubblewrap" else "namespaces"
        base = Path("/home") if os.geteuid() == 0 else Path(tempfile.mkdtemp())
        c = hostile_payloads.Canaries(base / f"ddprobe-canary-{uuid.uuid4().hex[:8]}")
        c.plant()
        try:
            unsandboxed = hostile_payloads.run_unsandboxed(c) if backend == "bubblewrap" \
                else {}
            for o in hostile_payloads.run_all(c):
                proof = unsandboxed.get(o.payload)
                note = f"[{o.backend}]"
                if proof is not None:
                    note += f" unsandboxed: {', '.join(proof) or 'nothing to reach here'}"
                row("sandbox", o.payload, len(o.leaked),
                    note + (f" LEAKED: {o.leaked}" if o.leaked else ""))
        finally:
            c.close()
            shutil.rmtree(c.home, ignore_errors=True)
    os.environ.pop("DDPROBE_SANDBOX", None)


TERMINAL = {
    "OSC 0 title": "\x1b]0;pwned\x07",
    "OSC 52 clipboard": "\x1b]52;c;cm0gLXJmIH4K\x07",
    "OSC 8 link": "\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07",
    "CSI clear screen": "\x1b[2J\x1b[H",
    "C1 CSI": "\x9b31m",
    "rich markup [/red]": "[/red][link=https://evil.example]x[/link]",
    "bidi override": "\u202eevil",
}


def terminal_rows() -> None:
    for (name, payload), mode in [(kv, m) for kv in TERMINAL.items()
                                  for m in ("answer", "error")]:
        # answer: code whose exception message carries the payload, so it comes back in the
        # failing test's reason (the table's "why"); error: the payload is an HTTP 500 body
        answer = (f"```python\nraise RuntimeError({('seen ' + payload + ' end')!r})\n```\n"
                  if mode == "answer" else f"seen {payload} end")
        proc, url = hostile_server.start(mode, answer=answer)
        try:
            cp = subprocess.run([sys.executable, "-m", "ddprobe", "probe", "--url", url,
                                 "--tasks", "fizzbuzz,flatten", "--accept-tokens", "0"],
                                capture_output=True, text=True, timeout=120,
                                env={**os.environ, "COLUMNS": "200", "TERM": "xterm"})
        finally:
            hostile_server.stop(proc)
        both = cp.stdout + cp.stderr
        escapes = len(ESC_BYTES.findall(both))
        crashed = "Traceback" in both or "MarkupError" in both
        # the payload's text is on screen (else the row tests nothing), as text
        shown = "seen" in both and ("[/red]" in both if "markup" in name else True)
        where = "model code's error in the table" if mode == "answer" else \
            "HTTP 500 body in the error"
        row("terminal", f"{name} ({where})", escapes + int(crashed) + int(not shown),
            f"exit {cp.returncode}" + (" CRASH" if crashed else ""))


FORMAT_TEXT = ("".join(chr(c) for c in range(32)) + "\x7f\x9b\x9d\udcff lone \ud800\ufffe\uffff"
               + "".join(TERMINAL.values()) + "<script>alert(1)</script> | `x` =cmd|' /C calc'!A0")


def format_rows() -> None:
    from ddprobe.report.junit import junit_xml
    from ddprobe.runmodel import SmokeCase
    from ddprobe.smoke import HostSmoke, SmokeReport
    case = SmokeCase(classname="smoke.h", name="probe", status="failure", message=FORMAT_TEXT,
                     type="garbage", output=FORMAT_TEXT)
    rep = SmokeReport(run_id="r", run_dir=Path("."), wall_s=1.0,
                      hosts=[HostSmoke(host="h", cases=[case], properties={"v": FORMAT_TEXT})])
    try:
        ET.fromstring(junit_xml(rep))
        row("formats", "JUnit XML 1.0 (every illegal char)", 0)
    except ET.ParseError as e:
        row("formats", "JUnit XML 1.0 (every illegal char)", 1, str(e))
    cell = untrusted.for_csv(FORMAT_TEXT)
    buf = io.StringIO()
    csv.writer(buf).writerow([cell])
    back = next(csv.reader(io.StringIO(buf.getvalue())))
    bad = int(len(back) != 1) + int(bool(ESC_BYTES.search(cell))) + int(cell[:1] in "=+-@")
    row("formats", "CSV cell (controls, formula)", bad)
    md = untrusted.md_text(FORMAT_TEXT)
    bad = int("<script" in md) + int(bool(ESC_BYTES.search(md))) + int("\n" in md) + int(
        bool(re.search(r"(?<!\\)\|", md)))
    row("formats", "markdown cell (HTML, pipes, controls)", bad)
    doc = untrusted.dumps_json({"t": FORMAT_TEXT})
    try:
        doc.encode("utf-8")
        json.loads(doc)
        bad = int("\\ud800" in doc or "\\udcff" in doc)
    except (UnicodeEncodeError, ValueError):
        bad = 1
    row("formats", "JSON (lone surrogates)", bad)
    term = untrusted.clean(FORMAT_TEXT)
    row("formats", "terminal text (clean)", len(ESC_BYTES.findall(term)))


def name_rows() -> None:
    from ddprobe.errors import ConfigError
    from ddprobe.remote import build_command
    runs = Path(tempfile.mkdtemp()) / "runs" / "r" / "logs"
    bad_hosts = ["../../..", "../../../../tmp/x", "/etc/passwd", "..", "a/../../b", "h\x00x"]
    escaped = 0
    for h in bad_hosts:
        p = (runs / f"{untrusted.file_part(h)}-b8-graph.log").resolve()
        escaped += int(runs.resolve() not in p.parents)
    row("names", f"host names leaving runs/ ({len(bad_hosts)})", escaped)
    accepted = 0
    for name in ("-S", "-Secho pwned", "A=B", "1A", "A B", "", "A\x00B", "--"):
        try:
            build_command(["true"], env={name: "v"})
            accepted += 1
        except ConfigError:
            pass
    row("names", "env var names reaching the host (8)", accepted)


def secret_rows() -> None:
    secret = "s3cr3t-" + uuid.uuid4().hex
    xdg = tempfile.mkdtemp(prefix="ddprobe-bench-xdg-")
    runs = tempfile.mkdtemp(prefix="ddprobe-bench-runs-")
    env = {**os.environ, "XDG_DATA_HOME": xdg, "DDPROBE_RUNS": runs,
           "DDPROBE_TESTBED_PORT": os.environ.get("DDPROBE_TESTBED_PORT", "31977")}
    try:
        cp = subprocess.run([sys.executable, "-m", "ddprobe", "run", "-H", "testbed",
                             "--budget", "8", "--tasks", "fizzbuzz,flatten", "--json", "--env",
                             f"DDPROBE_BENCH_SECRET={secret}"], capture_output=True, text=True,
                            timeout=300, env=env)
        status = subprocess.run([sys.executable, "-m", "ddprobe", "server", "status", "-H",
                                 "testbed", "--json"], capture_output=True, text=True,
                                timeout=60, env=env)
        passed = _procs_with(secret)  # the server really got it: else the row proves nothing
        subprocess.run([sys.executable, "-m", "ddprobe", "server", "stop", "-H", "testbed"],
                       capture_output=True, timeout=120, env=env)
        files = [p for d in (xdg, runs) for p in Path(d).rglob("*")
                 if p.is_file() and secret.encode() in p.read_bytes()]
        outputs = int(secret in cp.stdout + cp.stderr) + int(secret in status.stdout)
        row("secrets", "run --env value in files (lock, server/last.json, journal, reports)",
            len(files) if passed else "invalid",
            f"run exit {cp.returncode}; the server's environment had it: {passed}"
            + (f" {files}" if files else ""))
        row("secrets", "run --env value in --json / server status output", outputs)
    finally:
        shutil.rmtree(xdg, ignore_errors=True)
        shutil.rmtree(runs, ignore_errors=True)


def _procs_with(needle: str) -> bool:
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if needle.encode() in (d / "environ").read_bytes():
                    return True
            except OSError:
                pass
    return False


def memory_rows() -> list[tuple[str, float]]:
    out = []
    code = ("import resource, sys\nfrom ddprobe.cli import main\nrc = main(sys.argv[1:])\n"
            # VmHWM: this process's own peak (ru_maxrss keeps a forking parent's across exec)
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
            "sys.stderr.write('\\nPEAK_RSS_KB %d\\n' % int(hwm.split()[1]))\nsys.exit(rc)\n")
    for mode, tasks, label in (("huge", "fizzbuzz", "1 GiB answer, Content-Length"),
                               ("chunked", "fizzbuzz", "1 GiB answer, chunked"),
                               ("chunked", "fizzbuzz,flatten,fibonacci,is_palindrome",
                                "4 x 1 GiB answers in flight"),
                               ("gzip", "fizzbuzz", "gzip bomb (1 GiB of zeros)")):
        proc, url = hostile_server.start(mode, size=1 << 30)
        try:
            cp = subprocess.run([sys.executable, "-c", code, "probe", "--url", url, "--json",
                                 "--tasks", tasks, "--accept-tokens", "0", "--concurrency",
                                 "4"], capture_output=True, text=True, timeout=300)
        finally:
            hostile_server.stop(proc)
        peak = next((int(ln.split()[1]) / 1024 for ln in cp.stderr.splitlines()
                     if ln.startswith("PEAK_RSS_KB")), float("nan"))
        crashed = "Traceback" in cp.stderr or cp.returncode not in (0, 1)
        out.append((label, peak))
        row("memory", label, int(crashed) + int(not peak < 300),
            f"peak RSS {peak:.0f} MB, exit {cp.returncode}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip the `ddprobe run` secrets check")
    a = ap.parse_args()
    sandbox_rows()
    terminal_rows()
    format_rows()
    name_rows()
    if not a.quick:
        secret_rows()
    memory_rows()
    w = max(len(r[1]) for r in ROWS)
    print(f"{'family':<9} {'payload':<{w}} leaked  note")
    for fam, payload, leaked, note in ROWS:
        print(f"{fam:<9} {payload:<{w}} {leaked:>6}  {note}")
    total = sum(int(r[2]) for r in ROWS if r[2].isdigit())
    invalid = sum(1 for r in ROWS if not r[2].isdigit())
    print(f"\n{len(ROWS)} payloads, {total} leaked (target 0)"
          + (f", {invalid} not measured" if invalid else ""))


if __name__ == "__main__":
    main()
