"""Every `ddprobe` command line the README shows (issue 24): each names real commands and
options (walked like the parser, as the help pages' examples are), and the ones that can run
here do: read-only commands against the built-in testbed host (the README's `b300` stands for
it), plans, examples. The long ones (a real bisect, smoke) are run by the tests of their own
commands (test_faults_wheel runs the quick start from an installed wheel)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from cli_util import check_example

from ddprobe.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"
# words that stand for something the reader fills in: such a line is checked, not run
PLACEHOLDERS = ("...", "RUN_ID", "RUN", "PATCH", "FILE", "PATTERN", "H", "HOST", "BUDGET",
                "DIR")


def readme_commands() -> list[str]:
    text = README.read_text(encoding="utf-8")
    lines: list[str] = []
    prose_lines: list[str] = []
    block: list[str] | None = None
    for raw in text.splitlines():
        if raw.strip().startswith("```"):
            if block is None:
                block = []
            else:  # a closing fence: the block's command lines (continuations joined)
                for ln in "\n".join(block).replace("\\\n", " ").splitlines():
                    ln = ln.strip().removeprefix("$ ")
                    if ln.startswith("ddprobe "):
                        lines.append(ln)
                block = None
            continue
        (block if block is not None else prose_lines).append(raw)
    prose = " ".join(prose_lines)
    lines += [s for s in re.findall(r"`([^`]+)`", prose) if s.startswith("ddprobe ")]
    out = []
    for ln in lines:
        ln = re.sub(r"\s+#.*$", "", ln).strip()  # a trailing comment
        for part in ln.split(";"):
            part = re.split(r" > | \\?\| ", part)[0]  # a redirect, a pipe (`\|` in a table)
            part = " ".join(part.split())
            if part.startswith("ddprobe ") and part not in out:
                out.append(part)
    return out


def synopsis(line: str) -> bool:
    """A usage synopsis (`patch apply|revert ...`, `[--dry-run]`), not a command line."""
    return "[" in line or "|" in line


COMMANDS = readme_commands()


def test_the_readme_shows_commands() -> None:
    assert len(COMMANDS) >= 30, COMMANDS


@pytest.mark.parametrize("line", COMMANDS)
def test_every_readme_command_names_real_options(line: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    if synopsis(line):  # its command path exists, at least
        words = [w for w in line.split()[1:3] if re.fullmatch(r"[a-z-]+", w)]
        assert main([*words[:1], "--help"]) == 0, line
        return
    check_example(line)
    words = shlex.split(line)[1:]
    if not set(PLACEHOLDERS) & set(words):
        # the words before the first option are a real command path
        path = [w for w in words[:2] if not w.startswith("-") and re.fullmatch(r"[a-z-]+", w)]
        assert main([*path, "--help"]) == 0, line
    capsys.readouterr()


# read-only or host-free commands that run here in seconds, with the built-in testbed for b300
RUNNABLE = re.compile(r"^ddprobe (hosts|facts|grep-buffers|flags|grep|report|classify|patch "
                      r"(status|list|diff)|bisect (--host \S+ --budgets \S+ --plan|log|"
                      r"start|next|visualize|reset)|playbook actions|testbed install)( |$)")


def _runnable() -> list[str]:
    out = []
    for ln in COMMANDS:
        ln = ln.replace("--host b300", "--host testbed").replace("-H b300", "-H testbed")
        needs_host = re.match(r"ddprobe (facts|grep|grep-buffers|flags|patch|bisect --)", ln)
        if RUNNABLE.match(ln) and not synopsis(ln) and \
                not set(PLACEHOLDERS) & set(ln.split()) and "--check" not in ln and \
                "b300" not in ln and (not needs_host or "--host" in ln):
            out.append(ln)
    return out


@pytest.mark.parametrize("line", _runnable())
def test_the_readme_commands_that_can_run_here_run(line: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DDPROBE_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("DDPROBE_BISECT_SESSION", str(tmp_path / "BISECT_SESSION"))
    if " bisect " in line and " start" not in line and "--plan" not in line:
        assert main(["bisect", "start", "--budgets", "8,16"]) == 0
    words = shlex.split(line)[1:]
    code = main(words)
    cap = capsys.readouterr()
    # a README command is never a usage error nor a bug here; report/log need a run first
    assert code not in (2, 70), (line, code, cap.err[-2000:])
    if words[0] in ("hosts", "facts", "grep-buffers", "flags", "playbook", "testbed") or \
            "--plan" in words:
        assert code == 0, (line, code, cap.err[-2000:])
