"""Start-up (issue 24.16): `ddprobe --version` and a TAB completion import neither pandas nor
paramiko (nor httpx): each costs ~0.5-1 s on a small machine. The times themselves are
measured side by side with `python -c pass` in benchmarks/startup.py, not here."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("pandas", "paramiko", "httpx")


def _imported(args: list[str], env: dict[str, str]) -> tuple[str, set[str]]:
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "ddprobe", *args],
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    names = {ln.rsplit("|", 1)[-1].strip() for ln in res.stderr.splitlines() if "|" in ln}
    return res.stdout, names


def _complete(words: str) -> dict[str, str]:
    n = len(words.split()) - (0 if words.endswith(" ") else 1)
    return {"_DDPROBE_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(n)}


def test_version_imports_nothing_heavy() -> None:
    out, names = _imported(["--version"], {})
    assert out.startswith("ddprobe ")
    assert not {*HEAVY, "typer", "rich"} & names, sorted({*HEAVY, "typer", "rich"} & names)


@pytest.mark.parametrize("words,expect", [
    ("ddprobe bisect --host te", ["test-1", "test-2", "testbed"]),
    ("ddprobe facts --host te", ["test-1", "test-2", "testbed"]),
    ("ddprobe -i HOSTS patch status --host test-", ["test-1", "test-2"])])
def test_a_completion_imports_nothing_heavy(words: str, expect: list[str],
                                            tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts:\n  test-1: {}\n  test-2: {}\n")
    out, names = _imported([], {"DDPROBE_INVENTORY": str(inv),
                                **_complete(words.replace("HOSTS", str(inv)))})
    assert sorted(out.split()) == expect
    assert not set(HEAVY) & names, sorted(set(HEAVY) & names)
