"""The inputs the parser fuzzing found (tests/test_fuzz_parsers.py, benchmarks/fuzz_parsers.py),
each now its parser's documented error or a result, never another exception."""
from __future__ import annotations

import json
from pathlib import Path

import fuzz_util
import pytest

from ddprobe.bisect.sessionlog import parse_suspect, replay
from ddprobe.cell.memcheck import parse_memcheck
from ddprobe.errors import ConfigError, DdprobeError
from ddprobe.hostside.patchtext import PatchTextError, parse_patch
from ddprobe.intlist import IntListError, parse_ints
from ddprobe.inventory import builtin_testbed, inventory_from_text, load_inventory
from ddprobe.inventory.ansible import MAX_RANGE_HOSTS, expand_range
from ddprobe.playbook.expr import ExprError, evaluate, parse
from ddprobe.probes.coding import extract_code
from ddprobe.probes.garbage import garbage_flags, text_stats
from ddprobe.server.preflight import _one
from ddprobe.sources.grep import _parse_grep, _parse_rg
from ddprobe.store import load_run
from ddprobe.yamlio import load_yaml

HUGE = "9" * 5000  # Python refuses int() of more than 4,300 digits with a ValueError


def test_a_control_character_in_yaml_is_a_config_error_naming_its_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"x\.yaml:2: YAML cannot hold the character 0x1f"):
        load_yaml(tmp_path / "x.yaml", "a: 1\nb: \x1f\n")
    with pytest.raises(ConfigError, match="hosts.yaml:1:"):
        inventory_from_text("\x1f", tmp_path / "hosts.yaml")


def test_a_yaml_number_of_thousands_of_digits_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="x.yaml: YAML value that cannot be read"):
        load_yaml(tmp_path / "x.yaml", f"a: {HUGE}\n")


def test_a_yaml_mapping_key_that_is_a_list_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"x\.yaml:2: a mapping key must be a scalar"):
        load_yaml(tmp_path / "x.yaml", "a: 1\n? [1, 2]\n: b\n")


def test_a_hosts_yaml_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    p = tmp_path / "hosts.yaml"
    p.write_bytes(b"hosts:\n  gpu: {host: \xff}\n")
    with pytest.raises(ConfigError, match="hosts.yaml: not UTF-8 text"):
        load_inventory(str(p))
    with pytest.raises(ConfigError, match="hosts.yaml: not UTF-8 text"):
        load_yaml(p)


def test_a_number_too_large_for_a_float_in_hosts_yaml(tmp_path: Path) -> None:
    text = "hosts:\n  gpu:\n    server:\n      health_timeout: 1" + "0" * 400 + "\n"
    with pytest.raises(ConfigError, match="too large a number"):
        inventory_from_text(text, tmp_path / "hosts.yaml")


def test_a_hunk_header_with_a_huge_line_number_is_malformed() -> None:
    with pytest.raises(PatchTextError, match="malformed hunk header"):
        parse_patch(f"# id: p\n--- a/x.py\n+++ b/x.py\n@@ -{HUGE} +1 @@\n-a\n+b\n")


def test_a_when_number_of_thousands_of_digits_is_an_expr_error() -> None:
    with pytest.raises(ExprError, match="more than 40 characters"):
        parse(f"x == {HUGE}")
    with pytest.raises(ExprError, match="more than 40 characters"):
        parse(f"x[{HUGE}]")
    assert evaluate(parse("x == 12345678901234567890"), {"x": 12345678901234567890}) is True


def test_ansible_ranges_that_name_too_many_hosts_are_refused_before_expanding(
        tmp_path: Path) -> None:
    assert expand_range("gpu[01:03]") == ["gpu01", "gpu02", "gpu03"]
    for bad in (f"gpu[1:{HUGE}]", "gpu[0:99999999999]", "g[0:999][0:999]", "g[1:3:0]",
                f"g[1:3:{HUGE}]"):
        with pytest.raises(ValueError, match="more than|step"):
            expand_range(bad)
    assert len(expand_range("g[1:100][1:100]")) == MAX_RANGE_HOSTS
    with pytest.raises(ConfigError, match="more than 10000 hosts"):
        inventory_from_text("[gpu]\nb300-[1:99999999999]\n", tmp_path / "fleet.ini")


def test_ansible_ini_and_json_with_huge_or_odd_values(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must be a port number"):
        inventory_from_text(f"[gpu]\nb300 ansible_port={HUGE}\n", tmp_path / "fleet.ini")
    with pytest.raises(ConfigError, match="invalid JSON: a number too long"):
        inventory_from_text('{"all": {"hosts": [%s]}}' % HUGE, tmp_path / "fleet.json")
    hv = {"_meta": {"hostvars": {"b": {"ansible_port": 1e999}}}, "all": {"hosts": ["b"]}}
    with pytest.raises(ConfigError, match="must be a port number"):
        inventory_from_text(json.dumps(hv).replace("Infinity", "1e999"), tmp_path / "f.json")
    for odd in ('{"_meta": []}', '{"all": {"hosts": 1}}', '{"all": {"vars": [1]}}',
                '{"_meta": {"hostvars": {"b": 1}}}', '{"all": {"children": 3}}'):
        with pytest.raises(ConfigError, match="must be an? "):
            inventory_from_text(odd, tmp_path / "fleet.json")


def test_memcheck_numbers_of_thousands_of_digits_are_not_findings() -> None:
    rep = parse_memcheck(f"========= Invalid __global__ write of size {HUGE} bytes\n"
                         f"========= ERROR SUMMARY: {HUGE} errors\n"
                         "========= Invalid __global__ write of size 4 bytes\n"
                         "=========     and is ,,, bytes after the nearest allocation at 0x1 "
                         "of size 8 bytes\n")
    assert rep.error_count is None and len(rep.findings) == 1
    assert rep.findings[0].size == 4 and rep.findings[0].distance == 0


def test_preflight_warnings_that_are_not_a_list_are_ignored() -> None:
    item = {"status": "ok", "warnings": 12, "values": {"cuda_graph_max_bs": 8}}
    res = _one(builtin_testbed(), item, "entry", "0.5.10")
    assert res.status == "ok" and res.warnings == ()


def _journal(tmp_path: Path, *lines: bytes) -> Path:
    (tmp_path / "journal.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return tmp_path


_RUN = b'{"type": "run", "command": "bisect"}'


def test_a_damaged_journal_entry_is_a_config_error_naming_its_line(tmp_path: Path) -> None:
    for bad in (b'{"type": "cell", "host": "h"}',  # no config
                b'{"type": "cell", "host": "h", "config": {"budget": 1e999}, "outcome": "ok"}',
                b'{"type": "verdict", "kind": "ok", "confidence": "high", "budgets": 3}'):
        with pytest.raises(ConfigError, match=r"journal.jsonl:2: a damaged (cell|verdict) entry"):
            load_run(_journal(tmp_path, _RUN, bad))
    with pytest.raises(ConfigError, match=r"journal.jsonl:2: a journal line that is not a JSON"):
        load_run(_journal(tmp_path, _RUN, b"[1, 2]"))


def test_a_torn_or_undecodable_journal_line_is_skipped(tmp_path: Path) -> None:
    """A kill mid-write may cut a line inside a character: skipped like any torn line."""
    rec = load_run(_journal(tmp_path, _RUN, b'{"type": "note", "text": "caf\xc3',
                            b'{"type": "note", "text": 3}', b"[" * 100_000))
    assert rec.meta == {"command": "bisect"} and rec.notes == ["3"]


def test_a_session_log_with_huge_or_unicode_numbers_is_a_config_error() -> None:
    start = "ddprobe bisect start --host gpu-a --budgets 8,16,32,64\n"
    for mark in (f"ddprobe bisect bad {HUGE}", "ddprobe bisect bad 1\u00b2",
                 f"ddprobe bisect good b{HUGE}-graph"):
        with pytest.raises(ConfigError, match="not a cell key"):
            replay(start + mark + "\n")
    with pytest.raises(ConfigError, match="--budgets: a value of more than 18 digits"):
        replay(f"ddprobe bisect start --budgets 8,{HUGE}\n")
    assert parse_suspect("buf@srt/x.py:1\u00b2").line is None
    with pytest.raises(IntListError, match="more than 18 digits"):
        parse_ints("1" * 19)


def test_garbage_statistics_take_a_lone_surrogate_from_json() -> None:
    text = json.loads('"\\ud800' + " ok" * 200 + '"')
    assert text_stats(text).chars == len(text) and isinstance(garbage_flags(text), list)


def test_a_model_answer_compiled_for_a_check_prints_no_warning(
        capfd: pytest.CaptureFixture[str]) -> None:
    assert extract_code("x = 1if 2 else 3\n") is not None
    assert extract_code("(" * 100_000) is None
    assert "SyntaxWarning" not in capfd.readouterr().err


def test_grep_output_of_another_shape_is_skipped_or_malformed() -> None:
    rg = "\n".join([json.dumps({"type": "match", "data": {"lines": 3}}),
                    json.dumps({"type": "match", "data": {"path": {"bytes": 5},
                                                          "lines": {"text": "x"},
                                                          "line_number": 1}}),
                    json.dumps({"type": "context", "data": {"path": {"text": "/r/a.py"},
                                                            "lines": {"text": "y"},
                                                            "line_number": "2"}}),
                    json.dumps({"type": "match", "data": {"path": {"text": "/r/a.py"},
                                                          "lines": {"text": "z\n"},
                                                          "line_number": 3}})])
    assert [(h.file, h.line, h.text) for h in _parse_rg(rg, "/r/")] == [("a.py", 3, "z")]
    grep_lines = f"/r/a.py\x001\u00b2:x\n/r/a.py\x00{HUGE}:y\n/r/b.py\x007:z\n"
    assert [(h.file, h.line) for h in _parse_grep(grep_lines, "/r/")] == [("b.py", 7)]
    answer = {"ok": True, "result": {"root": 1, "output": "", "tool": "rg", "install": {}}}
    with pytest.raises(DdprobeError, match="'root' is int, not text"):
        fuzz_util.BY_NAME["answer-grep"].parse(json.dumps(answer) + "\n")


# what a host's Python source can hold besides a syntax error: an undecodable byte (read with
# surrogateescape), a NUL byte, nesting past the parser's limits
_BAD_SOURCES = ("x = '\udcff'\n", "x = 1\x00\n", "x = " + "(" * 300 + "1" + ")" * 300 + "\n",
                "x = " + "-" * 100_000 + "1\n")


@pytest.mark.parametrize("text", _BAD_SOURCES, ids=["surrogate", "nul", "parens", "unary"])
def test_host_sources_that_do_not_parse_are_each_readers_error(text: str) -> None:
    from ddprobe.sources.backends import class_index, known_backends
    from ddprobe.sources.bufscan import scan_module
    from ddprobe.sources.flags import SERVER_ARGS
    from ddprobe.sources.flagsrc import parse_flags
    with pytest.raises(ConfigError, match="srt/server_args.py.*cannot parse"):
        parse_flags({SERVER_ARGS: text})
    assert parse_flags({SERVER_ARGS: "import argparse\n", "srt/other.py": text}).flags == ()
    assert class_index({"srt/x.py": text}) == {} and known_backends({"srt/x.py": text}) == []
    assert (scan_module("x.py", text).error or "").startswith("cannot parse")
