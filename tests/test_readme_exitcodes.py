"""The README's exit-code table is checked against ddprobe/exitcodes.py: every code the enum
defines has a row, every row names a code the enum defines, each exactly once."""
from __future__ import annotations

import re
from pathlib import Path

from ddprobe.exitcodes import ExitCode

README = Path(__file__).resolve().parents[1] / "README.md"


def _table_codes() -> list[int]:
    text = README.read_text(encoding="utf-8")
    section = text.split("### Exit codes", 1)[1].split("\n#", 1)[0]
    codes: list[int] = []
    for line in section.splitlines():
        m = re.match(r"^\|\s*([0-9][0-9 /]*)\|", line)
        if m:
            codes += [int(x) for x in m.group(1).split("/") if x.strip()]
    return codes


def test_every_exit_code_is_in_the_readme_table_once() -> None:
    codes = _table_codes()
    assert len(codes) == len(set(codes)), "a code has two rows"
    assert sorted(codes) == sorted(int(c) for c in ExitCode)


def test_the_git_bisect_abort_code_is_documented() -> None:
    assert 128 in _table_codes() and int(ExitCode.BISECT_ABORT) == 128
