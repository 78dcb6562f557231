"""The parsers of untrusted text, their documented errors, their real seed corpora, and one
mutation engine: shared by tests/test_fuzz_parsers.py (hypothesis drives the mutations) and
benchmarks/fuzz_parsers.py (a seeded random.Random drives them, 100,000 inputs per parser).

A target is one parser as ddprobe calls it, with the text in and the exceptions it documents
(`errors`; empty for a parser that must take any text, a log or a sanitizer report, and never
raise). Anything else escaping it is a bug.
"""
from __future__ import annotations

import atexit
import functools
import gzip
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddprobe.errors import ConfigError, DdprobeError, RefusedError
from ddprobe.hostside.patchtext import PatchTextError, parse_patch
from ddprobe.inventory import Host, builtin_testbed, inventory_from_text
from ddprobe.playbook.expr import ExprError
from ddprobe.remote import RemoteOptions
from ddprobe.remote.base import CmdResult
from ddprobe.remote.local import LocalRemote

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"

Parse = Callable[[str], object]


@dataclass(frozen=True)
class Target:
    name: str
    what: str  # the parser, as a reader finds it
    parse: Parse
    errors: tuple[type[BaseException], ...]  # what it documents raising; () = never raises
    seeds: Callable[[], list[str]]


# ----- seed corpora (the real files) ------------------------------------------------------------

MAX_SEED_CHARS = 64 << 10  # the start of a longer corpus file (a 1,000-finding memcheck report)


def _read(paths: Sequence[Path]) -> list[str]:
    out = []
    for p in sorted(paths):
        raw = p.read_bytes()
        if p.suffix == ".gz":
            raw = gzip.decompress(raw)
        out.append(raw.decode("utf-8", "replace")[:MAX_SEED_CHARS])
    return out


def _log_seeds() -> list[str]:
    return _read([*(DATA / "logs").glob("*.log"), DATA / "sglang-0.5.11-h200-ngram-no-ninja.log",
                  DATA / "testbed-h200-ssh-latent-b8-sanitize.log"])


def _memcheck_seeds() -> list[str]:
    return _read([*DATA.glob("compute-sanitizer-*.txt"), *DATA.glob("testbed-h200-memcheck-*")])


def _patch_seeds() -> list[str]:
    return _read(list((ROOT / "playbooks" / "patches").glob("*.patch"))
                 + list((ROOT / "ddprobe" / "bundled" / "patches").glob("*.patch"))
                 + list((ROOT / "benchmarks" / "patches").glob("*.patch")))


def _hosts_seeds() -> list[str]:
    return _read(list((ROOT / "ddprobe" / "inventory" / "examples").glob("*.yaml"))
                 + [ROOT / "hosts.example.yaml"])


def _playbook_seeds() -> list[str]:
    return _read(list((ROOT / "playbooks").glob("*.yaml"))
                 + list((ROOT / "ddprobe" / "bundled").glob("*.yaml")))


def _when_seeds() -> list[str]:
    found = []
    for text in _playbook_seeds():
        found += [m.group(2).strip().strip("'\"") for m in
                  re.finditer(r"^\s*(when|assert):\s*(.+)$", text, re.M)]
        found += re.findall(r"\$\{([^}]*)\}", text)
    return sorted(set(found)) + [
        "bisect.verdicts.any(kind == 'buffer_sizing' and 16 in budgets)",
        "facts.install.version == '0.5.10' or not buffers.flagged.any()",
        "rerun.outcome in ['ok', 'degraded']", "not (a.b[0] >= 2.5) and c.count(it > 1) != 3",
    ]


def _journal_seeds() -> list[str]:
    return _read([DATA / "journal-old-bisect" / "journal.jsonl"])


# the example Ansible inventories the tests read
def _ansible_seeds(suffix: str) -> Callable[[], list[str]]:
    return lambda: _read(list((DATA / "ansible").glob(f"*{suffix}")))


# ----- the parsers, as ddprobe calls them ------------------------------------------------------

_TMP = Path(tempfile.gettempdir())


def _inventory(name: str) -> Parse:
    # a path that does not exist: an `ansible:` key it names resolves beside it, to nothing
    path = _TMP / "ddprobe-fuzz-nonexistent" / name
    return lambda text: inventory_from_text(text, path)


def _pattern(spec: str) -> object:
    from ddprobe.inventory.pattern import select
    return select(spec, _example_inventory())


@functools.cache
def _example_inventory() -> Any:
    return inventory_from_text((ROOT / "ddprobe" / "inventory" / "examples" /
                                "hosts.example.yaml").read_text(), ROOT / "hosts.example.yaml")


def _playbook(text: str) -> object:
    from ddprobe.playbook.schema import load_playbook
    return load_playbook(_TMP / "ddprobe-fuzz-playbook.yaml", _testbed(), text=text)


@functools.cache
def _testbed() -> Host:
    return builtin_testbed()


_SCOPE: dict[str, Any] = {
    "bisect": {"verdicts": [{"kind": "buffer_sizing", "budgets": [16, 32]}], "status": "ok"},
    "facts": {"install": {"version": "0.5.10"}}, "buffers": {"flagged": [{"name": "b"}]},
    "rerun": {"outcome": "ok"}, "a": {"b": [1, 2]}, "c": [0, 1, 2], "budgets": [8, 16],
    "host": {"name": "testbed"}, "result": None,
}


def _when(text: str) -> object:
    from ddprobe.playbook import expr
    node = expr.parse(text)
    return expr.evaluate(node, _SCOPE)


def _log(text: str) -> object:
    from ddprobe.cell.logverdict import classify_log
    from ddprobe.signatures import match_all
    return classify_log(text), match_all(text)


def _decode(text: str) -> object:
    from ddprobe.signatures.decode import decode_notes, summarise_decode
    s = summarise_decode(text)
    return decode_notes(s, http_accept=1.5)


def _phases(text: str) -> object:
    from ddprobe.cell.phases import cell_phases, log_phases
    return log_phases(text), cell_phases({"start": 1.0, "health": 30.0, "probes": 2.0}, text)


def _memcheck(text: str) -> object:
    from ddprobe.cell.memcheck import match_buffer, parse_memcheck
    rep = parse_memcheck(text)
    bufs = [{"name": "custom_mask", "bytes": 295_560}, {"name": "x", "bytes": None}]
    return rep.to_dict(), [f.summary for f in rep.findings], [match_buffer(f, bufs)
                                                              for f in rep.findings]


def _journal(text: str) -> object:
    from ddprobe.store import load_run
    d = _journal_dir()
    (d / "journal.jsonl").write_text(text, encoding="utf-8", errors="surrogatepass")
    return load_run(d)


@functools.cache
def _journal_dir() -> Path:
    d = Path(tempfile.mkdtemp(prefix="ddprobe-fuzz-journal-"))
    atexit.register(shutil.rmtree, d, True)
    return d


def _server_args(text: str) -> object:
    from ddprobe.sources.flags import SERVER_ARGS
    from ddprobe.sources.flagsrc import parse_flags
    # the newer releases declare their flags in other modules too: only server_args.py here
    return parse_flags({SERVER_ARGS: text}, package="sglang", version="0.5.10")


def _server_args_seeds() -> list[str]:
    """ddtestbed's server_args.py, and the real SGLang ones of the test cache where built (the
    smaller releases: each input is parsed with `ast`)."""
    cache = Path.home() / ".cache" / "ddprobe-tests" / "venvs"
    real = [p for p in cache.glob("sglang-*/lib/python3*/site-packages/sglang/srt/server_args.py")
            if p.stat().st_size < MAX_SEED_CHARS]
    return _read([ROOT / "ddtestbed" / "srt" / "server_args.py", *real])


def _session_log(text: str) -> object:
    from ddprobe.bisect.sessionlog import replay
    return [(s.hosts, [v.kind for v in verdicts]) for s, _, verdicts in replay(text)]


def _session_log_seeds() -> list[str]:
    from ddprobe.bisect.sessionlog import render_log
    from ddprobe.store import load_run
    return [render_log(load_run(DATA / "journal-old-bisect")),
            "ddprobe bisect start --host gpu-a --budgets 8,16,32,64 --max-bs 64\n"
            "ddprobe bisect good 8\nddprobe bisect bad 32 --mode 'crash x'\n"
            "ddprobe bisect bad 16 --no-graph\nddprobe bisect skip 64\n"]


def _answer_text(text: str) -> object:
    from ddprobe.probes.coding import extract_code
    from ddprobe.probes.garbage import divergence, garbage_flags, text_stats
    return (extract_code(text, "solve"), extract_code(text), garbage_flags(text),
            text_stats(text), divergence(text, "def solve(x):\n    return x\n"))


def _answer_text_seeds() -> list[str]:
    suite = json.loads((ROOT / "ddprobe" / "probes" / "suites" / "coding.json").read_text())
    out = []
    for task in suite.get("tasks", [])[:20] if isinstance(suite, dict) else []:
        for v in task.values():
            if isinstance(v, str) and len(v) > 20:
                out.append(f"Here is the code:\n```python\n{v}\n```\n")
                out.append(v)
    return out or ["```python\ndef solve(x):\n    return x\n```\n", "def solve(x): return x"]


# ----- host answers: what a host program prints, read by the real client and its callers -------

class AnswerRemote(LocalRemote):
    """The local remote whose commands all 'print' one fixed stdout: what a hostile or broken
    host's program might. Nothing is run."""

    stdout = ""

    def run(self, argv: Sequence[str], *, timeout: float | None = None, check: bool = False,
            input: str | bytes | None = None, env: Any = None, cwd: str | None = None
            ) -> CmdResult:
        return self._checked(CmdResult(tuple(argv), 0, self.stdout, "", 0.0), check)


@functools.cache
def _answer_remote() -> AnswerRemote:
    h = Host(name="fuzz", python=sys.executable, transport="local", source="fuzz",
             package="json")
    return AnswerRemote(h, RemoteOptions())


def _answer(reader: Callable[[AnswerRemote], object]) -> Parse:
    def parse(text: str) -> object:
        r = _answer_remote()
        r.stdout = text
        return reader(r)
    return parse


def _facts(r: AnswerRemote) -> object:
    from ddprobe.facts import gather_facts
    return gather_facts(r, r.host)


def _install(r: AnswerRemote) -> object:
    from ddprobe.hostside.client import find_install
    return find_install(r)


def _preflight(r: AnswerRemote) -> object:
    from ddprobe.results import Config
    from ddprobe.server.launch import build_launch
    from ddprobe.server.preflight import clear_cache, run_preflight
    clear_cache()
    h = _testbed()
    return run_preflight(r, h, [build_launch(h, Config(budget=8)),
                                build_launch(h, Config(budget=16, graph=False))])


def _kernel_log(r: AnswerRemote) -> object:
    from ddprobe.cell.kernel_log import recent_xid_lines
    return recent_xid_lines(r, 60.0)


def _grep(r: AnswerRemote) -> object:
    from ddprobe.sources.grep import grep
    return grep(r, "def ", context=1)


def _ops(r: AnswerRemote) -> object:
    from ddprobe.hostside.client import call
    res = call(r, "status", {"state": "/nonexistent"}, program="ops")
    return {k: res[k] for k in ("running", "pids", "state")}


@functools.cache
def real_answers() -> dict[str, str]:
    """Each host program's real answer on this machine (the answer seeds), run through the
    local remote."""
    import subprocess

    from ddprobe.hostside.client import BOOT, program_input, program_source
    out = {}
    asks = {"facts": ("facts", {"package": "json", "port": 1, "bind": "127.0.0.1"}),
            "sources": ("locate", {"package": "json"}), "kernel_log": ("xid", {"window": 60.0}),
            "ops": ("status", {"state": "/nonexistent"})}
    grep = {"package": "json", "pattern": "def ", "subdir": None, "context": 1, "fixed": False,
            "ignore_case": False, "include": []}
    asks["grep-rg"] = ("grep", {**grep, "tool": "rg"})
    asks["grep-grep"] = ("grep", {**grep, "tool": "grep"})
    for name, (op, req) in asks.items():
        program = "sources" if name.startswith("grep") else name
        p = subprocess.run([sys.executable, "-c", BOOT, op],
                           input=program_input(program_source(program, op), json.dumps(req)),
                           capture_output=True, timeout=120, check=False)
        out[name] = p.stdout.decode("utf-8", "replace")[-MAX_SEED_CHARS:]
    out["preflight"] = json.dumps({"ok": True, "result": {
        "ok": True, "version": "0.5.10", "entry": "prepare_server_args", "results": [
            {"key": "b8-graph", "status": "ok", "warnings": ["w"],
             "values": {"speculative_num_draft_tokens": 9, "cuda_graph_max_bs": 8,
                        "disable_cuda_graph": False, "attention_backend": "triton"}},
            {"key": "b16-eager", "status": "rejected",
             "error": {"kind": "argparse", "message": "unrecognized arguments: --x",
                       "line": "l", "where": "w", "type": "SystemExit"}}]}}) + "\n"
    return out


def _answer_seeds(*programs: str) -> Callable[[], list[str]]:
    def seeds() -> list[str]:
        err = '{"ok": false, "error": {"kind": "io", "message": "disk", "errno": 28}}\n'
        out = [err]
        for p in programs:
            out += [real_answers()[p], "progress line\n" + real_answers()[p]]
        return out
    return seeds


TARGETS: tuple[Target, ...] = (
    Target("patch", "hostside.patchtext.parse_patch", parse_patch, (PatchTextError,),
           _patch_seeds),
    Target("hosts.yaml", "inventory.inventory_from_text (hosts.yaml)", _inventory("hosts.yaml"),
           (ConfigError,), _hosts_seeds),
    Target("ansible-ini", "inventory.inventory_from_text (INI)", _inventory("fleet.ini"),
           (ConfigError,), _ansible_seeds(".ini")),
    Target("ansible-yaml", "inventory.inventory_from_text (Ansible YAML)",
           _inventory("fleet.yml"), (ConfigError,), _ansible_seeds(".yml")),
    Target("ansible-json", "inventory.inventory_from_text (ansible-inventory --list)",
           _inventory("fleet.json"), (ConfigError,), _ansible_seeds(".json")),
    Target("host-pattern", "inventory.pattern.select", _pattern, (ConfigError,),
           lambda: ["gpu", "all", "gpu*,!b300-*", "~b[0-9]+.*", "all:&gpu", "gpu-a,testbed"]),
    Target("playbook", "playbook.schema.load_playbook", _playbook, (ConfigError,),
           _playbook_seeds),
    Target("when", "playbook.expr.parse + evaluate", _when, (ExprError,), _when_seeds),
    Target("server-log", "cell.logverdict.classify_log + signatures.match_all", _log, (),
           _log_seeds),
    Target("decode-lines", "signatures.decode.summarise_decode + decode_notes", _decode, (),
           _log_seeds),
    Target("cell-phases", "cell.phases.log_phases + cell_phases", _phases, (), _log_seeds),
    Target("memcheck", "cell.memcheck.parse_memcheck", _memcheck, (), _memcheck_seeds),
    Target("answer-facts", "facts.gather_facts (the facts program's answer)", _answer(_facts),
           (DdprobeError,), _answer_seeds("facts")),
    Target("answer-install", "hostside.client.find_install", _answer(_install),
           (DdprobeError,), _answer_seeds("sources")),
    Target("answer-preflight", "server.preflight.run_preflight", _answer(_preflight),
           (DdprobeError,), _answer_seeds("preflight")),
    Target("answer-kernel-log", "cell.kernel_log.recent_xid_lines", _answer(_kernel_log), (),
           _answer_seeds("kernel_log")),
    Target("answer-grep", "sources.grep.grep (rg --json and grep -rnZ output)", _answer(_grep),
           (DdprobeError,), _answer_seeds("grep-rg", "grep-grep")),
    Target("answer-ops", "hostside.client.call (ops status) and its fields", _answer(_ops),
           (DdprobeError,), _answer_seeds("ops")),
    Target("journal", "store.load_run", _journal, (ConfigError,), _journal_seeds),
    Target("session-log", "bisect.sessionlog.replay (a `bisect log` file)", _session_log,
           (ConfigError,), _session_log_seeds),
    Target("server-args", "sources.flagsrc.parse_flags (the host's server_args.py) + check",
           _server_args, (ConfigError, RefusedError), _server_args_seeds),
    Target("model-answer", "probes.coding.extract_code + probes.garbage", _answer_text, (),
           _answer_text_seeds),
)
BY_NAME = {t.name: t for t in TARGETS}


# ----- mutations --------------------------------------------------------------------------------

# text that parsers trip on: format tokens of every corpus, huge and odd numbers, controls
GENERIC = (
    "", "\n", "\r", "\r\n", "\t", "\x00", "\x1b[31m", "\x1b]0;t\x07", "\u202e", "\ud800", "\ufffd",
    "é", "\U0001f600", " " * 64, "9" * 5000, "-1", "0", "00", "1e999", "-0", "NaN", "0x7f",
    "1,000,000", "'", '"', "\\", "[", "]", "{", "}", "(", ")", ":", ",", "=", "#", "&a", "*a",
    "!!binary", "!!python/object:os.system", "%YAML 1.1", "---", "...", "- ", "? ", "|", ">",
    "${", "${x}", "null", "true", "~", "@@", "@@ -0,0 +0,0 @@", "@@ -1 +1 @@",
    "\\ No newline at end of file", "--- a/x.py", "+++ b/x.py", "/dev/null", "../..",
    "Traceback (most recent call last):", '  File "/x/y.py", line 1, in f', "Decode batch. ",
    "Decode batch, #running-req: 1, accept len: 9" + "9" * 400 + ".00, ",
    "Load weight begin.", "Load weight end. elapsed=1" + "0" * 400 + ".5 s",
    "Capture cuda graph end. Time elapsed: 99999999999999999999 s", "[0001-01-01 00:00:00 TP0] ",
    "[9999-12-31 23:59:59 TP0] ", "Capture cuda graph bs [1, 2, 4, " + "8" * 3000 + "]",
    "========= Invalid __global__ write of size " + "1" * 5000 + " bytes",
    "========= ERROR SUMMARY: " + "9" * 5000 + " errors", "=========     and is 1 bytes after "
    "the nearest allocation at 0x1 of size " + "9" * 5000 + " bytes", "COMPUTE-SANITIZER",
    '{"ok": true, "result": {}}', '{"ok": true, "result": []}', '{"ok": false, "error": 1}',
    '{"ok": 1}', "[" * 300, '{"a":' * 300, "gpu[0:9999999999]", "gpu[a:z:0]", "h[01:03]",
    "ansible_port=99999999999999999999", "ansible_host=", "[all:vars]", "[g:children]",
    "all:", "hosts:", "children:", "vars:", '{"type": "cell"}', '{"type": 1}', "[]", "1",
)


@dataclass(frozen=True)
class Op:
    """One mutation: kind, two positions (taken modulo the text), a payload."""

    kind: int
    a: int
    b: int
    payload: str


N_KINDS = 11
_JSON_VALUES: tuple[Any, ...] = (None, True, 0, -1, 1 << 70, 1.5, 1e308, "", "x", "\x00",
                                 [], {}, [1], {"a": 1}, "9" * 5000)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def mutate(seed: str, ops: Sequence[Op], others: Sequence[str] = ()) -> str:
    """`seed` changed by each op in turn (deterministic in its arguments)."""
    t = seed
    for op in ops:
        t = _apply(t, op, others)
    return t


def _apply(t: str, op: Op, others: Sequence[str]) -> str:
    n = len(t) + 1
    a, b = op.a % n, op.b % n
    lines = t.split("\n")
    la, lb = op.a % len(lines), op.b % len(lines)
    k = op.kind % N_KINDS
    if k == 0:  # replace one character
        return t[:a] + op.payload + t[a + 1:]
    if k == 1:  # delete a span
        lo, hi = sorted((a, b))
        return t[:lo] + t[hi:hi + 1] + t[hi + 1:] if hi - lo < 4096 else t[:lo] + t[lo + 64:]
    if k == 2:  # insert
        return t[:a] + op.payload + t[a:]
    if k == 3:  # duplicate a line
        return "\n".join(lines[:la + 1] + lines[la:])
    if k == 4:  # drop a line
        return "\n".join(lines[:la] + lines[la + 1:])
    if k == 5:  # swap two lines
        lines[la], lines[lb] = lines[lb], lines[la]
        return "\n".join(lines)
    if k == 6:  # truncate
        return t[:a]
    if k == 7:  # a line of another seed (splicing formats together)
        if others:
            src = others[op.b % len(others)].split("\n")
            lines.insert(la, src[op.a % len(src)])
        return "\n".join(lines)
    if k == 8:  # a number becomes another
        nums = list(_NUMBER.finditer(t))
        if not nums:
            return t + op.payload
        m = nums[op.a % len(nums)]
        repl = op.payload if _NUMBER.fullmatch(op.payload or "x") else \
            ("9" * (1 + op.b % 5000), "0", "-1", "1e309")[op.b % 4]
        return t[:m.start()] + repl + t[m.end():]
    if k == 9:  # a JSON line's value becomes another of any type
        return "\n".join(lines[:la] + [_json_mutate(lines[la], op)] + lines[la + 1:])
    # k == 10: a line's indentation changes (YAML structure)
    ln = lines[la]
    lines[la] = " " * (op.b % 9) + ln.lstrip(" ") if op.a % 2 else ln.lstrip()
    return "\n".join(lines)


def _json_mutate(line: str, op: Op) -> str:
    try:
        doc = json.loads(line)
    except ValueError:
        return line + op.payload
    paths: list[tuple[Any, Any]] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for key in v:
                paths.append((v, key))
                walk(v[key])
        elif isinstance(v, list):
            for i in range(len(v)):
                paths.append((v, i))
                walk(v[i])
    walk(doc)
    if not paths:
        return json.dumps(_JSON_VALUES[op.b % len(_JSON_VALUES)])
    parent, key = paths[op.a % len(paths)]
    if op.b % 7 == 0 and isinstance(parent, dict):
        del parent[key]
    else:
        parent[key] = _JSON_VALUES[op.b % len(_JSON_VALUES)]
    return json.dumps(doc)


def dictionary(seeds: Sequence[str]) -> list[str]:
    """Payloads: the generic list and the words and lines of the seeds."""
    words: set[str] = set()
    for s in seeds:
        for ln in s.split("\n")[:400]:
            words.add(ln)
            words.update(re.findall(r"[\w.#@$:/-]+", ln)[:20])
    return list(GENERIC) + sorted(words)[:4000]


def outcome(target: Target, text: str) -> str:
    """'ok', 'documented' (one of its errors), or raises what escaped."""
    try:
        target.parse(text)
    except target.errors or ():  # noqa: B030 - () catches nothing
        return "documented"
    return "ok"
