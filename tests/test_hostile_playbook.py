"""Playbooks (and any YAML ddprobe reads) that try to exhaust memory or recursion
(issue 14 item 3): each is refused fast with one message naming the file and line, exit 3,
nothing run.

Expected answers, written before the runs: a billion-laughs alias bomb -> "expands to more
than 100000 values" at the line of the bomb; `${v}` doubled 40 times -> "grows past" at the
line of the variable that crosses the bound; 5000 nested parentheses in `when:` -> "nested
deeper than 100 levels" at the step's line; 5000 nested YAML lists -> "nested deeper"; an
inventory with the same bomb -> the same message, file:line, exit 3.
"""
from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest

from ddprobe.cli import main
from ddprobe.exitcodes import ExitCode

LAUGHS = ("  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
          + "".join(f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10)))


def _run(tmp_path: Path, text: str, capsys) -> tuple[int, str, float]:
    p = tmp_path / "pb.yaml"
    p.write_text(text)
    t0 = time.monotonic()
    code = main(["playbook", "run", str(p), "--host", "testbed", "--dry-run"])
    return code, capsys.readouterr().err, time.monotonic() - t0


@pytest.mark.parametrize("case,text,want,line", [
    ("alias bomb", "name: x\nvars:\n" + LAUGHS + "steps:\n  - action: facts\n",
     "expands to more than", None),
    ("${v} doubling", "name: x\nvars:\n  v0: abcdefghij\n" + "".join(
        f"  v{i}: '${{v{i - 1}}}${{v{i - 1}}}'\n" for i in range(1, 41))
     + "steps:\n  - action: facts\n", "grows past", 20),  # v17 (10 x 2^17 chars), line 3+17
    ("5000 parentheses", "name: x\nsteps:\n  - action: facts\n    when: '"
     + "(" * 5000 + "true" + ")" * 5000 + "'\n", "expression longer than", 4),
    ("deep parentheses", "name: x\nsteps:\n  - action: facts\n    when: '"
     + "(" * 1000 + "true" + ")" * 1000 + "'\n", "nested deeper than 100", 4),
    ("5000 not", "name: x\nsteps:\n  - action: facts\n    when: '" + "not " * 2000
     + "true'\n", "nested deeper than 100", 4),
    ("nested yaml", "name: x\nvars:\n  v: " + "[" * 5000 + "]" * 5000 + "\n"
     "steps:\n  - action: facts\n", "nested deeper than", None),
])
def test_resource_bombs_are_bounded_with_file_and_line(case, text, want, line, tmp_path,
                                                       capsys):
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code, err, secs = _run(tmp_path, text, capsys)
    assert code == ExitCode.CONFIG, err
    assert want in err and "pb.yaml" in err and "Traceback" not in err, err
    if line is not None:
        assert f"pb.yaml:{line}" in err, err
    # bounded, not expanded: generous for a loaded machine (an expanding bomb runs out of time
    # or memory long after this)
    assert secs < 30
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    assert grown_mb < 200, grown_mb


def test_inventory_alias_bomb(tmp_path, capsys):
    inv = tmp_path / "hosts.yaml"
    inv.write_text("defaults:\n  labels:\n" + LAUGHS.replace("  l", "    l")
                   + "hosts:\n  gpu: {host: 127.0.0.1}\n")
    code = main(["-i", str(inv), "hosts"])
    err = capsys.readouterr().err
    assert code == ExitCode.CONFIG and "expands to more than" in err and "hosts.yaml" in err
