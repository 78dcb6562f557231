"""Playbooks: the condition language, schema errors (file:line, before anything runs), dry run.

Runs that touch a host (the testbed locally, a testbed install over real SSH) are in
test_playbook_run.py.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddprobe.cli import main
from ddprobe.errors import ConfigError
from ddprobe.inventory import Host, ServerSettings
from ddprobe.playbook import (
    ActionResult,
    ActionSpec,
    builtin_registry,
    load_playbook,
    parse_var_overrides,
)
from ddprobe.playbook.actions import ActionUnavailable, bind_call, coerce
from ddprobe.playbook.expr import ExprError, evaluate, parse, root_names
from ddprobe.playbook.schema import Template

REPO = Path(__file__).resolve().parents[1]
HOST = Host(name="b300", host="b300", package="sglang",
            server=ServerSettings(budget=8, max_bs=64, algorithm="DDTREE"))
DATA = {"bisect": {"run_id": "r1", "verdicts": [
    {"kind": "buffer_sizing", "budgets": [16], "confidence": "high"},
    {"kind": "graph_capture", "budgets": [32], "confidence": "medium"},
    {"kind": "buffer_sizing", "budgets": [64], "confidence": "high"}]},
    "fix": None, "budgets": [8, 16, 32, 64], "name": "b300"}


@pytest.mark.parametrize("text,want", [
    ("bisect.verdicts.any(kind == 'buffer_sizing')", True),
    ("bisect.verdicts.any(kind == 'kernel')", False),
    ("bisect.verdicts.count(kind == 'buffer_sizing') == 2", True),
    ("bisect.verdicts.count() >= 3 and not bisect.verdicts.all(confidence == 'high')", True),
    ("bisect.verdicts.any(kind == 'graph_capture' and 32 in budgets)", True),
    ("bisect.verdicts.none(16 in budgets and kind == 'kernel')", True),
    ("bisect.verdicts[1].budgets[0] > 16", True),
    ("bisect.verdicts[7] == null", True),
    ("fix == null and fix.anything == null", True),  # a skipped step reads as null
    ("fix.verdicts.any(kind == 'ok')", False),
    ("name in ['b300', 'rtxpro'] or false", True),
    ("'b3' in name", True),
    ("budgets.count(it >= 32) == 2", True),
    ("(1 < 2) == true", True),
    ("bisect.run_id != 'r1'", False),
])
def test_conditions_evaluate_on_plain_data(text: str, want: bool) -> None:
    assert evaluate(parse(text), DATA) is want


@pytest.mark.parametrize("text,msg", [
    ("bisect.verdictz.any(kind == 'x')", "bisect has no field 'verdictz' (fields: run_id, "
                                         "verdicts)"),
    ("nosuch == 1", "unknown name 'nosuch'"),
    ("bisect.run_id < 3", "cannot order a string and a number"),
    ("bisect.run_id.any()", ".any() needs a list"),
    ("bisect.verdicts.first()", "unknown method 'first'"),
    ("budgets ==", "expected a value"),
    ("budgets = 1", "unexpected character '='"),
    ("__import__('os').system('true')", "unexpected '('"),
    ("budgets.__class__", "budgets is a list, it has no field '__class__'"),
])
def test_condition_errors_are_explained(text: str, msg: str) -> None:
    with pytest.raises(ExprError, match=re.escape(msg)):
        evaluate(parse(text), DATA)


def test_root_names_skip_per_item_fields() -> None:
    node = parse("bisect.verdicts.any(kind == 'x' and fix_budget in budgets) or fix != null")
    assert root_names(node) == {"bisect", "fix"}


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60))
def test_parser_only_ever_raises_expr_error(text: str) -> None:
    try:
        node = parse(text)
    except ExprError:
        return
    try:
        evaluate(node, DATA)
    except ExprError:
        pass


def test_coerce_kinds() -> None:
    assert coerce("ints", "8,16, 32") == [8, 16, 32]
    assert coerce("ints", 16) == [16] and coerce("ints", [8, "16"]) == [8, 16]
    for bad in ("8,0", [8, 0], [], "x"):  # the command line's rules (ddprobe/intlist.py)
        with pytest.raises(ValueError):
            coerce("ints", bad)
    assert coerce("bool", "false") is False and coerce("int", "64") == 64
    assert coerce("strs", "--a 1 '--b c'") == ["--a", "1", "--b c"]
    for kind, bad in (("int", "x"), ("bool", "maybe"), ("int", True), ("str", [1])):
        with pytest.raises(ValueError):
            coerce(kind, bad)


def _write(tmp_path: Path, text: str, name: str = "pb.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


GOOD = """\
name: t
vars:
  budgets: "8,16"
  patch: p1
steps:
  - action: facts
    register: facts
  - action: bisect
    with: {budgets: "${budgets}", max_bs: "${host.max_bs}"}
    register: bisect
  - action: report
    with: {run: "${bisect.run_id}"}
"""

# (playbook text, expected "line: message" fragment). Each is otherwise valid.
BAD = [
    ("name: t\nstepz: []\n", 2, "unknown playbook key 'stepz'; did you mean 'steps'?"),
    ("steps:\n  - action: facts\n    registr: f\n", 3,
     "unknown step 1 key 'registr'; did you mean 'register'?"),
    ("steps:\n  - action: facts\n  - action: grep_buffers\n", 3,
     "step 2: unknown action 'grep_buffers'; did you mean 'grep-buffers'?"),
    ("steps:\n  - action: grep\n    with:\n      patern: x\n", 4,
     "action 'grep' has no argument 'patern'; did you mean 'pattern'?"),
    ("steps:\n  - action: grep\n", 2, "action 'grep' needs argument 'pattern'"),
    ("steps:\n  - action: grep-buffers\n    with:\n      max_bs: lots\n", 4,
     "argument 'max_bs': expected a whole number, got 'lots'"),
    ("steps:\n  - action: sweep\n    with:\n      budgets: [8]\n      graph: bth\n", 5,
     "argument 'graph': unknown value 'bth' (known: both, on, off)"),
    ("steps:\n  - action: facts\n    when: facts.gpus.any(\n", 3, "expected"),
    ("steps:\n  - action: facts\n    when: bisect.verdicts.any(kind == 'x')\n", 3,
     "unknown name 'bisect'"),
    ("steps:\n  - action: report\n    with: {run: '${later.run_id}'}\n  - action: facts\n"
     "    register: later\n", 3, "unknown variable 'later'"),
    ("steps:\n  - action: facts\n    register: f\n  - action: facts\n    register: f\n", 5,
     "'f' is already registered by an earlier step"),
    ("vars: {a: 1}\nsteps:\n  - action: grep\n    with: {pattern: '${b}'}\n", 4,
     "unknown variable 'b'"),
    ("steps: {action: facts}\n", 1, "steps: must be a non-empty list of steps"),
    ("steps:\n  - action: facts\n    with: [1]\n", 3, "with: must be a mapping"),
    ("steps:\n  - action: facts\n    when: \"${x} == 1\"\n", 3, "write names directly"),
    ("steps:\n  - action: facts\n    register: result\n", 3, "not a usable name"),
    ("steps:\n  - action: facts\n  - action: a: b\n", 3, "YAML syntax error"),
    ("steps:\n  - action: facts\n    ignore_errors: sometimes\n", 3,
     "ignore_errors: must be true or false"),
    ("steps:\n  - action: fail\n    assert: result.x ==\n", 3, "assert: expected a value"),
]


@pytest.mark.parametrize("text,line,msg", BAD)
def test_schema_errors_name_file_and_line(tmp_path: Path, text: str, line: int,
                                          msg: str) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError) as ei:
        load_playbook(p, HOST, check_available=False)
    assert str(ei.value).startswith(f"{p}:{line}: "), str(ei.value)
    assert msg in str(ei.value)


def test_vars_resolve_with_types_and_runtime_refs(tmp_path: Path) -> None:
    pb = load_playbook(_write(tmp_path, GOOD), HOST, check_available=False)
    bis = pb.steps[1]
    assert bis.args["budgets"] == [8, 16] and bis.args["max_bs"] == 64
    ref = pb.steps[2].args["run"]
    assert isinstance(ref, Template) and ref.text == "${bisect.run_id}"
    assert ref.render({"bisect": {"run_id": "r9"}}) == "r9"


def test_var_overrides_parse_as_yaml_scalars(tmp_path: Path) -> None:
    pb = load_playbook(_write(tmp_path, GOOD), HOST, check_available=False,
                       overrides=parse_var_overrides(["budgets=8,16,32", "patch=x y"]))
    assert pb.steps[1].args["budgets"] == [8, 16, 32] and pb.vars["patch"] == "x y"
    with pytest.raises(ConfigError, match="the playbook has no variable 'budget'"):
        load_playbook(_write(tmp_path, GOOD), HOST, overrides={"budget": "8"})
    with pytest.raises(ConfigError, match="NAME=VALUE"):
        parse_var_overrides(["novalue"])


def test_interpolation_and_escapes(tmp_path: Path) -> None:
    text = ("vars:\n  b: [8, 16]\n  n: 3\nsteps:\n  - action: grep\n"
            "    with: {pattern: 'x${n}y $${n} ${b}', path: '${host.name}/d'}\n")
    step = load_playbook(_write(tmp_path, text), HOST, check_available=False).steps[0]
    assert step.args["pattern"] == "x3y ${n} 8,16" and step.args["path"] == "b300/d"


def test_missing_action_is_a_clear_error_before_anything_runs(tmp_path: Path) -> None:
    ran: list[str] = []
    reg = builtin_registry()
    reg.register(ActionSpec("gpu-dance", "needs a module that does not exist",
                            ("ddprobe.no_such_module:dance",),
                            lambda ctx, a: ran.append("ran") or ActionResult({}, "")))
    p = _write(tmp_path, "steps:\n  - action: facts\n  - name: dance\n    action: gpu-dance\n")
    with pytest.raises(ConfigError) as ei:
        load_playbook(p, HOST, registry=reg)
    assert str(ei.value) == (f"{p}:4: step 2 'dance': action 'gpu-dance' not available: "
                             "ddprobe.no_such_module:dance: module ddprobe.no_such_module is "
                             "not installed")
    assert ran == []
    assert ActionSpec("x", "", ("ddprobe.report:nope",), lambda c, a: ActionResult(
        {}, "")).unavailable() == "ddprobe.report:nope: ddprobe.report has no function 'nope'"


def test_bind_call_passes_what_is_asked_and_names_what_is_missing() -> None:
    def run_cell(host: Host, config: str, *, store: object = None, repeat: int = 1) -> tuple:
        return host.name, config, store, repeat

    assert bind_call(run_cell, {"host": HOST, "config": "c", "budgets": [8]}) == (
        "b300", "c", None, 1)
    assert bind_call(run_cell, {"h": HOST, "config": "c"}, {"h": ("host",)})[0] == "b300"

    def needs_more(host: Host, secret: str) -> None:
        raise AssertionError("must not be called")

    with pytest.raises(ActionUnavailable, match="needs 'secret'"):
        bind_call(needs_more, {"host": HOST})


def test_shipped_playbooks_load(tmp_path: Path) -> None:
    for name in ("ddtree-graph-buffers.yaml", "smoke.yaml"):
        pb = load_playbook(REPO / "playbooks" / name, HOST, check_available=False)
        assert pb.steps and all(s.spec is not None for s in pb.steps)
    seed = load_playbook(REPO / "playbooks" / "ddtree-graph-buffers.yaml", HOST,
                         check_available=False)
    actions = [s.action for s in seed.steps]
    assert actions == ["facts", "flags", "grep", "grep-buffers", "bisect", "patch-apply", "run",
                       "report"]
    assert seed.steps[3].args == {"backend": "triton", "max_bs": 64, "budgets": [8, 16, 32, 64],
                                  "context_len": None, "include_per_batch": False}


def test_cli_dry_run_prints_resolved_steps_and_runs_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs"
    monkeypatch.setenv("DDPROBE_RUNS", str(runs))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))  # testbed not even installed
    p = _write(tmp_path, GOOD.replace("  - action: report", "  - action: patch-apply\n"
                                      "    with: {patch: '${patch}'}\n  - action: report"))
    code = main(["playbook", "run", str(p), "--host", "testbed", "--dry-run",
                 "--var", "budgets=8,16,32"])
    out = capsys.readouterr().out
    assert "budgets: 8,16,32" in out and "max_bs: 64" in out  # the testbed's max bs
    assert "patch: p1" in out and "${bisect.run_id} (at run time)" in out
    assert "changes the host" in out
    # nothing ran: no run directory, and the testbed prefix was never created
    assert not runs.exists() and not (tmp_path / "xdg").exists()
    if "NOT AVAILABLE" in out:
        assert code == 3
    else:
        assert code == 0


def test_cli_schema_error_is_one_line_with_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs"
    monkeypatch.setenv("DDPROBE_RUNS", str(runs))
    p = _write(tmp_path, "steps:\n  - action: patch-apply\n    with: {patch: x}\n"
                         "  - action: grep\n    with: {patern: y}\n")
    assert main(["playbook", "run", str(p), "--host", "testbed"]) == 3
    err = capsys.readouterr().err
    assert f"{p}:5: step 2 'grep': action 'grep' has no argument 'patern'" in err
    assert "Traceback" not in err and not runs.exists()
