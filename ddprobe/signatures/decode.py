"""SGLang's scheduler decode lines: acceptance and throughput read from the server's own log.

Two spellings across releases (read in the wheels): up to 0.5.2 `Decode batch. #running-req:
…`, from 0.5.5 `Decode batch, #running-req: …` (optionally `Decode batch [1234], …` with
SGLANG_LOG_FORWARD_ITERS). Fields, each optional: `#running-req`, `#token`, `token usage`,
`accept len` and `accept rate` (speculative decoding only), `cuda graph: True/False` (`cpu
graph`, `npu graph`, `musa graph` on other devices), `gen throughput (token/s)`, `#queue-req`.

The log is untrusted text: every value is parsed from a bounded regex, nothing else is read.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from statistics import fmean
from typing import Any, Final

from ddprobe.signatures.normalise import strip_prefix

MAX_LINES: Final = 20000  # the newest decode lines kept (a long run logs one every 40 steps)
_HEAD: Final = re.compile(r"\bDecode batch(?: \[\d{1,12}\])?(?P<sep>[.,])\s")
_NUM: Final = r"(\d{1,12}(?:\.\d{1,6})?)"
_FIELDS: Final = {
    "running_reqs": re.compile(r"#running-req: (\d{1,9})\b"),
    "tokens": re.compile(r"#token: (\d{1,12})\b"),
    "token_usage": re.compile(r"\btoken usage: " + _NUM),
    "accept_len": re.compile(r"\baccept len: " + _NUM),
    "accept_rate": re.compile(r"\baccept rate: " + _NUM),
    "cuda_graph": re.compile(r"\b(?:cuda|cpu|npu|musa) graph: (True|False)\b"),
    "gen_throughput": re.compile(r"gen throughput \(token/s\): " + _NUM),
    "queue_reqs": re.compile(r"#queue-req: (\d{1,9})\b"),
}
# acceptance this close to 1.00 means every draft token was rejected
_COLLAPSED: Final = 1.005


@dataclass(frozen=True)
class DecodeLine:
    line_no: int  # 1-based, in the text given
    spelling: str  # "Decode batch." | "Decode batch,"
    running_reqs: int | None = None
    tokens: int | None = None
    token_usage: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    cuda_graph: bool | None = None
    gen_throughput: float | None = None
    queue_reqs: int | None = None


@dataclass(frozen=True)
class DecodeSummary:
    """What the decode lines of one log say, beside what HTTP said."""

    lines: int
    spellings: tuple[str, ...]
    accept_len_mean: float | None = None
    accept_len_last: float | None = None
    accept_len_min: float | None = None
    accept_rate_mean: float | None = None
    gen_throughput_mean: float | None = None
    gen_throughput_max: float | None = None
    cuda_graph: str = "unknown"  # True | False | mixed | unknown
    running_reqs_max: int | None = None
    # accept len 1.00 on every speculative line that ran with CUDA graphs on
    collapsed_with_graphs: bool = False
    first_line: int = 0
    last_line: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spellings"] = list(self.spellings)
        return d

    def describe(self) -> str:
        parts = [f"{self.lines} decode line(s)"]
        if self.accept_len_mean is not None:
            parts.append(f"accept len mean {self.accept_len_mean:.2f} (last "
                         f"{self.accept_len_last:.2f})")
        if self.accept_rate_mean is not None:
            parts.append(f"accept rate {self.accept_rate_mean:.2f}")
        if self.gen_throughput_mean is not None:
            parts.append(f"gen throughput {self.gen_throughput_mean:.1f} tok/s")
        parts.append(f"cuda graph {self.cuda_graph}")
        return ", ".join(parts)


def parse_decode_lines(text: str) -> list[DecodeLine]:
    """Every decode line in `text` (the newest MAX_LINES), any logger prefix."""
    out: list[DecodeLine] = []
    for n, raw in enumerate(text.splitlines(), 1):
        if "Decode batch" not in raw:
            continue
        line = strip_prefix(raw)
        m = _HEAD.search(line)
        if m is None:
            continue
        rest = line[m.end():]
        vals: dict[str, Any] = {}
        for name, rx in _FIELDS.items():
            fm = rx.search(rest)
            if fm is None:
                continue
            v = fm.group(1)
            if name == "cuda_graph":
                vals[name] = v == "True"
            elif name in ("running_reqs", "tokens", "queue_reqs"):
                vals[name] = int(v)
            else:
                f = float(v)
                if math.isfinite(f):
                    vals[name] = f
        out.append(DecodeLine(line_no=n, spelling=f"Decode batch{m.group('sep')}", **vals))
    return out[-MAX_LINES:]


def summarise_decode(text_or_lines: str | list[DecodeLine]) -> DecodeSummary | None:
    """The decode lines of a log in one record; None when the log has none."""
    lines = parse_decode_lines(text_or_lines) if isinstance(text_or_lines, str) \
        else text_or_lines
    if not lines:
        return None
    acc = [d.accept_len for d in lines if d.accept_len is not None]
    rate = [d.accept_rate for d in lines if d.accept_rate is not None]
    tput = [d.gen_throughput for d in lines if d.gen_throughput is not None]
    with_graphs = [d.accept_len for d in lines if d.cuda_graph and d.accept_len is not None]
    running = [d.running_reqs for d in lines if d.running_reqs is not None]
    return DecodeSummary(
        lines=len(lines), spellings=tuple(sorted({d.spelling for d in lines})),
        accept_len_mean=_mean(acc, 3), accept_len_last=acc[-1] if acc else None,
        accept_len_min=min(acc, default=None), accept_rate_mean=_mean(rate, 3),
        gen_throughput_mean=_mean(tput, 2), gen_throughput_max=max(tput, default=None),
        cuda_graph=_graph_mode(lines), running_reqs_max=max(running, default=None),
        collapsed_with_graphs=bool(with_graphs) and all(a < _COLLAPSED for a in with_graphs),
        first_line=lines[0].line_no, last_line=lines[-1].line_no)


def _mean(values: list[float], ndigits: int) -> float | None:
    return round(fmean(values), ndigits) if values else None


def _graph_mode(lines: list[DecodeLine]) -> str:
    """"True" / "False" when every line that says agrees, "mixed", or "unknown"."""
    graphs = {d.cuda_graph for d in lines if d.cuda_graph is not None}
    if not graphs:
        return "unknown"
    return "mixed" if len(graphs) > 1 else str(graphs.pop())


def decode_notes(summary: DecodeSummary | None, *, http_accept: float | None) -> list[str]:
    """Evidence from the decode lines for a cell's notes."""
    if summary is None:
        return []
    notes = [f"server log: {summary.describe()}"]
    if summary.collapsed_with_graphs:
        notes.append("server log: accept len 1.00 on every decode line with cuda graph True: "
                     "evidence of acceptance collapse with graphs on"
                     + ("" if http_accept is not None else
                        " (HTTP reported no acceptance; the log is the only source)"))
    elif http_accept is not None and summary.accept_len_mean is not None and \
            abs(http_accept - summary.accept_len_mean) > 0.5:
        notes.append(f"HTTP acceptance {http_accept:.2f} and the log's mean "
                     f"{summary.accept_len_mean:.2f} differ by more than 0.5 (the log averages "
                     f"all requests of each interval, HTTP only the probes)")
    return notes
