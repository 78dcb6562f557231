"""The log corpus (tests/data/logs/*.log): real excerpts from public issues, each with its source
URL and the expected class in a two-line header, read by the tests and by
benchmarks/log_classification.py.

    # source: https://github.com/sgl-project/sglang/issues/5491
    # expect: outcome=crash phase=serving kind=cuda_illegal_address
    <the excerpt, 1-60 lines, exactly as posted (markdown quoting removed)>
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

OUTCOMES: Final = ("ok", "crash", "hang", "refused", "garbage", "error", "incomplete")
PHASES: Final = ("startup", "capture", "serving")
_URL: Final = re.compile(r"^# source: (https://github\.com/[\w.-]+/[\w.-]+/(?:issues|pull)/\d+)\s*$")
_EXPECT: Final = re.compile(r"^# expect: (?P<kv>(?:\w+=\S+\s*)+)$")


@dataclass(frozen=True)
class CorpusLog:
    path: Path
    url: str
    outcome: str
    phase: str
    kind: str  # "" for healthy logs
    text: str  # the excerpt (the header removed)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def lines(self) -> int:
        return len(self.text.splitlines())


def parse_corpus_file(path: Path) -> CorpusLog:
    """One corpus file; ValueError naming the file and line for a malformed header."""
    raw = path.read_text(encoding="utf-8").splitlines()
    if len(raw) < 3:
        raise ValueError(f"{path}:1: a corpus file needs a source line, an expect line and a log")
    m = _URL.match(raw[0])
    if m is None:
        raise ValueError(f"{path}:1: the first line must be '# source: <GitHub issue/PR URL>'")
    e = _EXPECT.match(raw[1])
    if e is None:
        raise ValueError(f"{path}:2: the second line must be '# expect: outcome=... phase=...'")
    kv = dict(item.split("=", 1) for item in e.group("kv").split())
    unknown = set(kv) - {"outcome", "phase", "kind"}
    if unknown or kv.get("outcome") not in OUTCOMES or kv.get("phase") not in PHASES:
        raise ValueError(f"{path}:2: expect needs outcome in {OUTCOMES}, phase in {PHASES} and "
                         f"optionally kind (got {kv})")
    return CorpusLog(path, m.group(1), kv["outcome"], kv["phase"], kv.get("kind", ""),
                     "\n".join(raw[2:]) + "\n")


def load_corpus(directory: Path) -> list[CorpusLog]:
    return [parse_corpus_file(p) for p in sorted(Path(directory).glob("*.log"))]
