"""The declarative CLI (issue 26.3): one spec per shared option, one integer-list parser with
one rule set for every command and for the session logs, choices that are the library's
vocabularies, the oversize factor's default stated once, one order option for the automatic
and the manual bisect (the old --graph-first / --eager-first accepted as its aliases)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest
import typer

from ddprobe.bisect.ladder import MAX_FACTOR, Order
from ddprobe.bisect.planner import PlanOptions
from ddprobe.bisect.run import BisectRequest
from ddprobe.bisect.sessionlog import replay
from ddprobe.bisect.sweep import GraphMode
from ddprobe.bisect.verdicts import ExitProtocol
from ddprobe.cli import get_app, main, options
from ddprobe.defaults import MAX_OVERSIZE_FACTOR, OVERSIZE_FACTOR
from ddprobe.errors import ConfigError
from ddprobe.exitcodes import ExitCode
from ddprobe.intlist import IntListError, parse_ints, parse_ints_or_default


def test_choices_are_the_librarys_vocabularies() -> None:
    assert [c.value for c in options.OrderChoice] == list(get_args(Order))
    assert [c.value for c in options.ExitProtocolChoice] == list(get_args(ExitProtocol))
    assert [c.value for c in options.GraphChoice] == list(get_args(GraphMode))


@pytest.mark.parametrize("text,want", [
    ("8,16,32", (8, 16, 32)), (" 64 , 8 ", (64, 8)), ("8,,16,", (8, 16)), ("+4", (4,))])
def test_the_integer_list_rules_accept(text: str, want: tuple[int, ...]) -> None:
    assert parse_ints(text) == want


@pytest.mark.parametrize("text,msg", [
    ("8,x", "expected comma-separated integers, got 'x'"), ("8,0", "must be positive, got 0"),
    ("-8", "must be positive, got -8"), ("", "no values given"), (" , ", "no values given"),
    ("8.5", "got '8.5'"), ("٣", "got '٣'"), ("default", "got 'default'")])
def test_the_integer_list_rules_refuse(text: str, msg: str) -> None:
    with pytest.raises(IntListError, match=msg):
        parse_ints(text)


def test_default_stands_for_the_hosts_setting_where_a_list_allows_it() -> None:
    assert parse_ints_or_default("64,default,-,None") == (64, None, None, None)
    with pytest.raises(IntListError, match="must be positive"):
        parse_ints_or_default("default,0")


# every command that takes an integer list refuses 0 with the same message, naming the flag,
# before it contacts a host (the host names do not exist: a parse error comes first)
@pytest.mark.parametrize("argv", [
    ["bisect", "--host", "nosuch", "--budgets", "8,0", "--plan"],
    ["sweep", "--host", "nosuch", "--budgets", "0"],
    ["sweep", "--host", "nosuch", "--budgets", "8", "--max-bs", "default,0"],
    ["smoke", "--host", "nosuch", "--budgets", "0,8"],
    ["grep-buffers", "--host", "nosuch", "--budgets", "0"],
    ["bisect", "start", "--budgets", "0,8"],
])
def test_zero_is_refused_by_every_command(argv: list[str], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DDPROBE_BISECT_SESSION", str(tmp_path / "session"))
    assert main(argv) == int(ExitCode.USAGE)
    err = capsys.readouterr().err
    assert "must be positive, got 0" in err and "'--" in err and "Traceback" not in err
    assert not (tmp_path / "session").exists()


def test_a_session_log_reads_budgets_by_the_same_rules() -> None:
    ok = replay("ddprobe bisect start --host h --budgets 16,8,16\n", "s.log")
    assert ok[0][0].spec.budgets == (8, 16)
    with pytest.raises(ConfigError, match=r"s\.log:1.*--budgets: values must be positive"):
        replay("ddprobe bisect start --host h --budgets 8,0\n", "s.log")


def _plan_request(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["bisect", "--host", "testbed", "--budgets", "8,16", "--plan", "--json",
                 *args]) == 0
    return json.loads(capsys.readouterr().out)["request"]


@pytest.mark.parametrize("args,order", [
    ([], "auto"), (["--order", "graph-first"], "graph-first"),
    (["--graph-first"], "graph-first"), (["--eager-first"], "eager-first"),
    (["--order", "EAGER-FIRST"], "eager-first"),
    (["--order", "graph-first", "--graph-first"], "graph-first")])
def test_the_automatic_bisect_takes_order_and_its_aliases(
        args: list[str], order: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _plan_request(capsys, *args)["order"] == order


@pytest.mark.parametrize("args,msg", [
    (["--graph-first", "--eager-first"], "--graph-first and --eager-first exclude each other"),
    (["--order", "auto", "--eager-first"], "--order auto and --eager-first exclude each other")])
def test_two_orders_exclude_each_other(args: list[str], msg: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bisect", "--host", "testbed", "--budgets", "8", "--plan", *args]) == \
        int(ExitCode.USAGE)
    assert msg in capsys.readouterr().err


@pytest.mark.parametrize("args,line", [
    (["--order", "graph-first"], "--order graph-first"),
    (["--eager-first"], "--order eager-first"),
    (["--oversize-factor", "8"], "--oversize-factor 8"), ([], None)])
def test_the_manual_bisect_takes_the_same_order_and_factor(
        args: list[str], line: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    session = tmp_path / "session"
    monkeypatch.setenv("DDPROBE_BISECT_SESSION", str(session))
    assert main(["bisect", "start", "--budgets", "8,16", *args]) == 0
    start = next(ln for ln in session.read_text().splitlines()
                 if ln.startswith("ddprobe bisect start"))
    if line is None:
        assert "--order" not in start and "--oversize-factor" not in start
    else:
        assert line in start
    spec = replay(session.read_text(), str(session))[0][0].spec
    assert spec.options.oversize_factor == (8 if "8" in args else OVERSIZE_FACTOR)


def test_the_oversize_factor_default_is_stated_once() -> None:
    cmd = typer.main.get_command(get_app())
    bisect = cmd.commands["bisect"]  # type: ignore[attr-defined]
    param = next(p for p in bisect.params if p.name == "oversize_factor")
    start = next(p for p in bisect.commands["start"].params if p.name == "oversize_factor")
    assert param.default == start.default == OVERSIZE_FACTOR
    assert BisectRequest(budgets=(8,)).oversize_factor == PlanOptions().oversize_factor == \
        OVERSIZE_FACTOR
    assert param.max == MAX_OVERSIZE_FACTOR == MAX_FACTOR


def test_an_oversize_factor_out_of_range_is_refused_in_a_session_log() -> None:
    with pytest.raises(ConfigError, match="--oversize-factor must be 2 to 1024, got 1"):
        replay("ddprobe bisect start --host h --budgets 8 --oversize-factor 1\n", "s.log")


# flags that knowingly mean different things in different commands (a host pattern to run on
# or the host a manual log records; one max bs or a sweep's list; a mark's --graph or a
# sweep's both|on|off; ...): each of these is its command's own option
SEVERAL_MEANINGS = {"--backend", "--baseline", "--check", "--dry-run", "--force", "--graph",
                    "--host", "--max-bs", "--no-compare", "--suite", "--tasks", "--var"}


def test_a_flag_of_several_commands_is_one_spec() -> None:
    """Every other flag two commands take reads the same in both (one spec in
    cli/options.py): a flag restated by hand drifts, and this fails."""
    from ddprobe.cli.helpdoc import long_name, walk
    helps: dict[str, dict[str, list[str]]] = {}
    for path, c in walk(typer.main.get_command(get_app())):
        for p in c.params:
            if getattr(p, "param_type_name", "") == "option" and not p.hidden:
                helps.setdefault(long_name(p), {}).setdefault(p.help or "", []).append(
                    " ".join(path))
    shared = {flag for flag, by_help in helps.items()
              if sum(map(len, by_help.values())) > 1}
    assert {"--budgets", "--json", "--order", "--oversize-factor", "--repeat"} <= shared
    assert {f: h for f, h in helps.items() if f in shared - SEVERAL_MEANINGS
            and len(h) > 1} == {}
    assert SEVERAL_MEANINGS <= shared  # an entry no longer needed is taken off the list


def test_a_playbooks_budgets_follow_the_same_rules(capsys: pytest.CaptureFixture[str]) -> None:
    # a playbook's `ints` argument (budgets) is read by ddprobe/intlist.py too: file:line
    assert main(["playbook", "run", "ddtree-graph-buffers", "--host", "testbed", "--var",
                 "budgets=8,0", "--dry-run"]) == int(ExitCode.CONFIG)
    err = capsys.readouterr().err
    assert "ddtree-graph-buffers.yaml:" in err and "'budgets': values must be positive, got 0" \
        in err


@pytest.mark.parametrize("args", [
    ["--eager-first", "--thorough"], ["--max-bs", "16", "--backend", "triton", "--tasks", "2"],
    ["--order", "graph-first", "--oversize-factor", "8", "--no-cheap-cells", "--repeat", "2"]])
def test_request_of_is_the_request_the_command_runs(args: list[str],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # the scenarios' `expect:` flags are read by it (tests/test_scenarios.py, the benchmarks)
    from ddprobe.cli.bisect import request_of
    assert request_of(["--budgets", "16,8", *args]).to_dict() == _plan_request(capsys, *args)


@pytest.mark.parametrize("args,tasks", [
    ([], ["8"]), (["--tasks", "all"], []), (["--tasks", "ALL"], []), (["--tasks", "3"], ["3"]),
    (["--tasks", "fizzbuzz, two_sum"], ["fizzbuzz", "two_sum"])])
def test_tasks_are_read_at_the_flag(args: list[str], tasks: list[str],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert _plan_request(capsys, *args)["tasks"] == tasks


@pytest.mark.parametrize("argv,msg", [
    (["bisect", "--host", "testbed", "--budgets", "8", "--plan", "--tasks", "0"],
     "values must be positive, got 0"),
    (["run", "--host", "nosuch", "--tasks", "-2"], "values must be positive, got -2"),
    (["probe", "--url", "http://127.0.0.1:9", "--tasks", " , "], "no task given")])
def test_a_bad_task_selection_is_a_usage_error(argv: list[str], msg: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == int(ExitCode.USAGE)
    err = capsys.readouterr().err
    assert "'--tasks'" in err and msg in err


def test_a_sweeps_backends_name_the_hosts_own_as_its_max_bs_does() -> None:
    assert options._names_or_default("triton, ,default,flashinfer") == \
        ("triton", None, None, "flashinfer")
    assert options._ints_or_default("64,default") == (64, None)
