"""Every help page: a real example, no typer type labels (`<str>`, `<int range>`), every
option explained, options in panels; every example names real options of its command; shell
completion is on and completes host names and run ids."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_util import check_example, cli_tree

from ddprobe.cli import main
from ddprobe.cli.helpdoc import EXAMPLES, long_name, walk

LABEL = re.compile(r"<(str|int|float|bool|path|text|int range|float range|file)>")




COMMANDS = [" ".join(p) for p, _ in walk(cli_tree())]
# `testbed serve` hands its arguments (--help too) to the testbed server's own parser
PAGES = [c for c in COMMANDS if c != "testbed serve"]


def _examples(c) -> list[str]:
    text = (c.help or "") + "\n" + (c.epilog or "")
    if "Example" not in text:
        return []
    tail = text.split("Example", 1)[1].replace("\\\n", " ")  # continued lines
    return [ln.strip() for ln in tail.splitlines() if ln.strip().startswith("ddprobe")]


@pytest.mark.parametrize("path", PAGES)
def test_help_page_has_an_example_and_no_type_labels(path: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*path.split(), "--help"]) == 0
    page = capsys.readouterr().out
    assert "Example" in page and "ddprobe " in page.split("Example", 1)[1], \
        f"`ddprobe {path}` has no example: add one to its docstring or to EXAMPLES in " \
        f"ddprobe/cli/helpdoc.py\n{page}"
    assert not LABEL.search(page), LABEL.search(page)
    cmd = {" ".join(p): c for p, c in walk(cli_tree())}[path]
    for p in cmd.params:
        if getattr(p, "param_type_name", "") == "option" and not p.hidden:
            assert p.help, f"{path}: option {long_name(p)} has no help"


def test_every_example_names_real_options() -> None:
    lines = [ln for p, c in walk(cli_tree()) for ln in _examples(c)]
    assert len(lines) >= len(COMMANDS)
    for ln in lines:
        for part in ln.split(";"):
            check_example(part.split(">")[0].strip())


def test_examples_table_names_only_real_commands() -> None:
    assert set(EXAMPLES) <= set(COMMANDS), set(EXAMPLES) - set(COMMANDS)


def test_options_sit_in_panels(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bisect", "--help"]) == 0
    page = capsys.readouterr().out
    for panel in ("Hosts", "Server config", "Bisect plan", "Output", "Manual bisect"):
        assert f"─ {panel}" in page


def _complete(words: str, env: dict[str, str]) -> list[str]:
    e = {**os.environ, **env, "_DDPROBE_COMPLETE": "complete_bash", "COMP_WORDS": words,
         "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
    out = subprocess.run([sys.executable, "-m", "ddprobe"], env=e, capture_output=True,
                         text=True, timeout=60)
    return out.stdout.split()


def test_completion_of_hosts_and_run_ids(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts:\n  b300-1: {}\n  b300-2: {}\n  rtx: {}\ngroups:\n  fleet: [rtx]\n")
    runs = tmp_path / "runs"
    for rid in ("20261201-101010-bisect-ab12", "20261201-111111-sweep-cd34"):
        (runs / rid).mkdir(parents=True)
        (runs / rid / "journal.jsonl").write_text("")
    env = {"DDPROBE_INVENTORY": str(inv), "DDPROBE_RUNS": str(runs)}
    assert _complete("ddprobe bisect --host b3", env) == ["b300-1", "b300-2"]
    assert _complete("ddprobe facts --host fleet,!r", env) == ["fleet,!rtx"]
    assert _complete("ddprobe report 2026", env) == ["20261201-111111-sweep-cd34",
                                                     "20261201-101010-bisect-ab12"]
    assert "--install-completion" in subprocess.run(
        [sys.executable, "-m", "ddprobe", "--help"], capture_output=True, text=True,
        timeout=60).stdout
