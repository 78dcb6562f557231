"""`ddprobe bisect` command line: --plan without touching a host, usage errors, protocol."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddprobe.cli import main
from ddprobe.exitcodes import ExitCode


def test_plan_prints_the_procedure_and_restart_bounds(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    assert main(["bisect", "--host", "testbed", "--budgets", "8,16,32,64", "--plan"]) == 0
    out = capsys.readouterr().out
    assert "first round: b64-graph" in out
    # the worst single threshold (buffer sizing from the smallest budget: b64, b16, b8 cheap
    # down to the frontier, b8's oversize cheap, what the cure leaves there (the cure with the
    # real weights, eager, eager once more on a divergence), each budget above its own
    # control) costs more than a sweep, which could not tell the modes apart
    assert "the full sweep takes 8" in out and "at most 9 for one failure threshold" in out
    assert "what a cure leaves: " in out
    # the host's deterministic mode is not claimed before its flags are read (the preview is)
    assert "has no --enable-deterministic-inference" not in out
    assert "eager with --enable-deterministic-inference on triton" in out
    assert "assumed ok (not tested" in out
    # the plan's time from the cost model (no earlier cells of this host: defaults)
    assert "  time: about " in out and "default phase times" in out
    assert "cheap cells where they save time" in out


def test_plan_json_with_repeat(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bisect", "--host", "testbed", "--budgets", "64,8,16", "--repeat", "2",
                 "--plan", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["request"]["budgets"] == [8, 16, 64] and doc["request"]["repeat"] == 2
    assert doc["plan"][-3].endswith("first round: b64-graph")
    assert "each cell x2 (--repeat)" in doc["plan"][0]
    assert doc["plan"][-2].endswith("the full sweep takes 12")
    assert "every cell with the real weights" in doc["plan"][-1]  # --repeat: no cheap cells


@pytest.mark.parametrize("args,msg", [
    (["--budgets", "8,x"], "expected comma-separated integers"),
    (["--budgets", "8,0"], "must be positive"),
    ([], "give --budgets"),
    (["--budgets", "8", "--graph-first", "--eager-first"], "exclude each other"),
])
def test_usage_errors_are_one_line(args: list[str], msg: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bisect", "--host", "testbed", *args, "--plan"])
    err = capsys.readouterr().err
    assert code == int(ExitCode.USAGE) and msg in err and "Traceback" not in err


def test_an_unknown_exit_protocol_aborts(capsys: pytest.CaptureFixture[str]) -> None:
    # any --exit-protocol is git bisect run's: a usage error aborts it (128), never "bad"
    code = main(["bisect", "--host", "testbed", "--budgets", "8", "--exit-protocol", "svn"])
    err = capsys.readouterr().err
    assert code == 128 and "'--exit-protocol'" in err and "'svn' is not one of 'bisect'" in err


def test_unknown_host_aborts_git_bisect_run(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # a configuration error is not "bad" for git bisect: it aborts (exit > 127)
    code = main(["bisect", "--host", "nosuch", "--budgets", "8", "--exit-protocol", "bisect"])
    assert code == 128 and "unknown host or group 'nosuch'" in capsys.readouterr().err
    assert main(["bisect", "--host", "nosuch", "--budgets", "8"]) == int(ExitCode.CONFIG)


def test_missing_confirm_patch_is_reported_before_any_restart(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bisect", "--host", "testbed", "--budgets", "8", "--confirm-patch",
                 "no-such-patch"])
    assert code == int(ExitCode.CONFIG) and "no-such-patch" in capsys.readouterr().err


def test_resume_of_an_unknown_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DDPROBE_RUNS", str(tmp_path))
    assert main(["bisect", "--resume", "nope"]) == int(ExitCode.CONFIG)
    assert "no run 'nope'" in capsys.readouterr().err
