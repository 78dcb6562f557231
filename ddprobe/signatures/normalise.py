"""Normalise log lines so the same failure on two hosts, runs or ranks compares equal.

Two steps: `strip_prefix` removes what loggers put in front of a message (timestamps,
`[2025-08-05 12:00:00 TP0]`, `[01-05 10:00:00 TP0]`, `[rank0]:`, vLLM's and Ray's
`(EngineCore pid=…)`, journald, docker, docker compose, containerd and kubectl prefixes, ANSI
colour, compute-sanitizer's `=====`), keeping the message's own indentation;
`normalise` then blanks what varies between runs inside the message: addresses, timestamps,
paths (kept as basenames), numbers (pids, sizes, durations, line numbers, batch sizes).
"""
from __future__ import annotations

import re
from typing import Final

MAX_KEY_CHARS: Final = 200

_ANSI: Final = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PREFIXES: Final = (
    # journald: "Aug 05 12:34:56 gpu-host python[1234]: "
    re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [\w.@/-]+(?:\[\d+\])?: "),
    # docker --timestamps / ISO stamps: "2025-08-05T12:34:56.123456789Z "; containerd / CRI
    # (kubelet's files under /var/log/pods): "2025-08-05T12:34:56.123456789Z stdout F "
    re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+"
               r"(?:(?:stdout|stderr) [FP] )?"),
    # SGLang / torch.distributed: "[2025-08-05 12:34:56 TP0] ", "[rank0]: ", "[TP0 DP1] ";
    # SGLang's 2026 loggers (multimodal_gen, datefmt %m-%d): "[01-05 10:00:00 TP0] "
    re.compile(r"^\[(?:\d{4}-\d\d-\d\d[^\]]*|\d\d-\d\d \d\d:\d\d:\d\d[^\]]*"
               r"|[^\]]{0,40}?\b(?:TP|DP|EP|PP|CP|rank|Rank)\s*\d+[^\]]{0,40})\]:?\s?"),
    # kubectl logs --prefix: "[pod/sglang-0/sglang] "
    re.compile(r"^\[pod/[^\]\s]+\]\s?"),
    # docker compose: "sglang-1  | ", "sglang_server_1 | "
    re.compile(r"^[\w.-]+[-_]\d+\s+\|\s?"),
    # Ray actors and workers: "(RayWorkerWrapper pid=1234, ip=10.0.0.2) ", "(pid=1234) ",
    # "(raylet) "
    re.compile(r"^\((?:[A-Za-z_][\w.:-]*)?(?:,?\s*(?:pid|ip|rank|node_id)=[^\s),]+)+\)\s?"),
    re.compile(r"^\((?:raylet|gcs_server|autoscaler|monitor|dashboard)[^)]{0,40}\)\s?"),
    # vLLM: "INFO 08-05 12:34:56 [engine.py:123] ", "ERROR 08-05 12:34:56.789 [...] "
    # (before 0.8 the file had no opening bracket: "ERROR 11-18 18:07:28 engine.py:366] ")
    re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?"
               r"(?: \[[^\]]*\]| [\w.]+:\d+\])?\s"),
    # vLLM worker prefixes: "(EngineCore_0 pid=12345) ", "(VllmWorker rank=1 pid=9) "
    re.compile(r"^\((?:EngineCore|VllmWorker|Worker|APIServer|RayWorker)[^)]*\)\s?"),
    # python logging default format: "ERROR:sglang.srt.managers.scheduler:"
    re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:\s?"),
    # SGLang's 2026 file-and-line format, after its ISO stamp: "INFO 151972 [scheduler.py:287] "
    re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d+ \[[\w.]+:\d+\]\s"),
    # uvicorn's level prefix after SGLang's stamp: "[2026-01-05 10:00:00] INFO:     "
    re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+"),
    # compute-sanitizer: "========= "
    re.compile(r"^=+ ?"),
)
# One alternation: a line is tried against all prefix forms in a single regex call.
_PREFIX_ANY: Final = re.compile("|".join(f"(?:{rx.pattern})" for rx in _PREFIXES))
_HEX: Final = re.compile(r"0x[0-9a-fA-F]+")
_LONG_HEX: Final = re.compile(r"\b[0-9a-f]{12,}\b")
_STAMP: Final = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
                           r"|\b\d\d:\d\d:\d\d(?:[.,]\d+)?\b")
_RANK_TAG: Final = re.compile(r"\[(?:TP|DP|EP|PP|CP|rank|Rank)\s*\d+\]\s?")
_PATH: Final = re.compile(r"(?<![\w:])\.{0,2}(?:/[\w.+@-]+)+/([\w.+@-]+)")
_NUMBER: Final = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,]\d+)*")
_SPACE: Final = re.compile(r"\s+")


def strip_prefix(line: str) -> str:
    """Remove logger prefixes (repeatedly: journald around an SGLang line, etc.)."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    line = line.rstrip("\r\n")
    for _ in range(6):
        m = _PREFIX_ANY.match(line)
        if m is None or not m.end():
            break
        line = line[m.end():]
    return line


def normalise(text: str) -> str:
    """The comparable form of a message: varying parts blanked, whitespace collapsed."""
    s = strip_prefix(text)
    s = _RANK_TAG.sub("", s)
    s = _HEX.sub("<addr>", s)
    s = _LONG_HEX.sub("<hex>", s)
    s = _STAMP.sub("<time>", s)
    s = _PATH.sub(r"\1", s)
    s = _NUMBER.sub("N", s)
    s = s.replace("`", "")  # quoting style differs between call sites and versions
    s = _SPACE.sub(" ", s).strip()
    if len(s) > MAX_KEY_CHARS:
        s = s[: MAX_KEY_CHARS - 3].rstrip() + "..."
    return s
