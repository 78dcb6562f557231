"""Classify one cell from what was seen: the process, its log and the probe report (pure).

Rules, in order (infrastructure is never blamed on the server):
  launch command broken (interpreter/module not found)  -> error
  the server's argparse refused the flags                -> refused
  process died / fatal signature in the log              -> crash (signature from the log)
  never healthy before the deadline                      -> hang
  alive but no probe answered                            -> error (network) or hang (timeouts)
  a garbage-class signature (NaN) / coding failures / junk / divergence -> garbage
  tok/s below ratio x baseline tok/s                     -> degraded
  else                                                   -> ok
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddprobe.hosttext import clean
from ddprobe.probes.runner import ProbeReport
from ddprobe.results import Outcome, Signature
from ddprobe.signatures import LogMatch, best_match, classify_phase, normalise


@dataclass(frozen=True)
class Baseline:
    """What a cell is compared with: a known-good config's speed, score and answers."""

    tok_s: float | None = None
    passed: int | None = None
    total: int | None = None
    texts: Mapping[str, str] | None = field(default=None, compare=False)
    key: str = ""

    @classmethod
    def from_cell(cls, cell: Any) -> Baseline:
        p = cell.probes
        texts = (cell.extra or {}).get("answers")
        return cls(tok_s=p.tok_s if p else None, passed=p.passed if p else None,
                   total=p.total if p else None, texts=dict(texts) if texts else None,
                   key=cell.config.key)


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    signature: Signature | None = None
    error: str | None = None
    match: LogMatch | None = None
    notes: tuple[str, ...] = ()


def launch_failure(log: str, package: str) -> str | None:
    """A line showing the launch command itself is broken (host configuration, not SGLang)."""
    pats = [r"exec: .*: not found", r"exec: .*: Permission denied",
            r"No module named '?" + re.escape(package) + r"(\.launch_server)?'?\)?\s*$",
            r"Error while finding module specification for '" + re.escape(package),
            r"can't open file .*launch_server"]
    for line in log.splitlines():
        for p in pats:
            if re.search(p, line):
                return line.strip()[:300]
    return None


_USAGE = re.compile(r"^usage: ", re.M)
_ARGPARSE_ERROR = re.compile(r"^\S[^\n]*?: error: (?P<msg>.+)$", re.M)


def argparse_refusal(log: str) -> Signature | None:
    """argparse's `parser.error()`: a usage block, then `PROG: error: MESSAGE` (exit 2)."""
    if not _USAGE.search(log):
        return None
    m = _ARGPARSE_ERROR.search(log)
    if m is None:
        return None
    return Signature("refused", normalise(m.group("msg").strip()), m.group(0).strip()[:500])


def _sig_from_log(log: str) -> tuple[LogMatch | None, Signature | None]:
    m = best_match(log)
    return m, (m.signature if m else None)


def classify_dead(log: str, *, package: str, during: str) -> Verdict:
    """The server exited (or logged a fatal line) during `during` (start-up | serving)."""
    broken = launch_failure(log, package)
    if broken:
        return Verdict(Outcome.ERROR, error=f"the launch command failed on the host: {broken}")
    refused = argparse_refusal(log)
    if refused is not None:
        raw = refused.line.split(": error: ", 1)[-1]
        return Verdict(Outcome.REFUSED, refused, f"the server refused the flags: {raw}")
    m, sig = _sig_from_log(log)
    if m is not None and (m.outcome == "refused" or (
            m.signature.kind == "traceback" and "(in server_args.py:" in m.signature.key)):
        # a ValueError from ServerArgs' own checks (__post_init__) is a refusal, not a crash
        assert sig is not None
        return Verdict(Outcome.REFUSED, sig, f"the server refused the flags: {sig.line}", m)
    if m is not None and m.outcome == "hang":
        return Verdict(Outcome.HANG, sig, None, m)
    if sig is None:
        phase = classify_phase(log) if log else "startup"
        tail = [ln for ln in log.splitlines() if ln.strip()]
        sig = Signature("exit", f"server exited during {during} ({phase}) with no catalogued "
                                f"error in its log", tail[-1].strip()[:500] if tail else "")
    return Verdict(Outcome.CRASH, sig, None, m)


def classify_hang(log: str, timeout: float) -> Verdict:
    m, sig = _sig_from_log(log)
    if sig is None or m is None or m.outcome not in ("hang", "crash"):
        phase = classify_phase(log) if log else "startup"
        tail = [ln for ln in log.splitlines() if ln.strip()]
        sig = Signature("hang", f"not healthy before the deadline ({phase})",
                        tail[-1].strip()[:500] if tail else "")
        m = None
    return Verdict(Outcome.HANG, sig, f"not healthy after {timeout:g}s", m)


def garbage_signature(report: ProbeReport) -> Signature:
    s = report.summary
    acc = "n/a" if s.accept_length is None else f"{s.accept_length:.2f}"
    key = f"accept_length={acc} coding {s.passed}/{s.total}"
    if s.divergence:
        key += " divergence"
    why = "; ".join([*s.garbage_flags, *(s.failures[:2])])
    return Signature("garbage", key, why[:500])


def classify_served(report: ProbeReport, *, alive: bool, log: str, package: str,
                    baseline: Baseline | None, ratio: float) -> Verdict:
    """After probes: the server came up; decide from the process, the log and the answers."""
    if not alive:
        return classify_dead(log, package=package, during="serving")
    m, sig = _sig_from_log(log)
    if m is not None and m.severity == "fatal" and m.outcome in ("crash", "hang"):
        # a component died while the HTTP front end stayed up
        return Verdict(Outcome.CRASH if m.outcome == "crash" else Outcome.HANG, sig, None, m)
    results = report.results
    errored = [r for r in results if r.errors and not r.text]
    if results and len(errored) == len(results):
        reason = errored[0].errors[0] if errored[0].errors else errored[0].reason
        if all("timed out" in " ".join(r.errors).lower() for r in errored):
            return Verdict(Outcome.HANG, Signature("hang", "no probe answered before its timeout",
                                                   reason[:500]), reason)
        return Verdict(Outcome.ERROR, error=f"no probe got an answer (server alive): {reason}")
    s = report.summary
    notes = tuple(s.notes)
    want = s.total
    if baseline is not None and baseline.passed is not None and baseline.total == s.total:
        want = min(s.total, baseline.passed)
    if m is not None and m.outcome == "garbage":
        return Verdict(Outcome.GARBAGE, sig, None, m, notes)
    if s.passed < want or s.garbage_flags or s.divergence:
        return Verdict(Outcome.GARBAGE, garbage_signature(report), None, None, notes)
    if baseline is not None and baseline.tok_s and s.tok_s is not None \
            and s.tok_s < ratio * baseline.tok_s:
        line = (f"tok/s {s.tok_s:.1f} < {ratio:g} x baseline {baseline.tok_s:.1f}"
                + (f" ({baseline.key})" if baseline.key else ""))
        return Verdict(Outcome.DEGRADED, Signature("degraded", f"tok/s below {ratio:g} x baseline",
                                                   line), None, None, notes)
    return Verdict(Outcome.OK, None, None, None, notes)


def excerpt(log: str, sig: Signature | None, *, lines: int = 25) -> list[str]:
    """The log's tail, with the signature's line first when the tail does not show it."""
    # cleaned: the excerpt goes to journals, reports, JUnit and the terminal (hosttext.py)
    all_lines = [ln.rstrip() for ln in clean(log).splitlines() if ln.strip()]
    tail = all_lines[-lines:]
    if sig is not None and sig.line and not any(sig.line in ln for ln in tail):
        for ln in all_lines:
            if sig.line in ln:
                return [ln[:500], "..."] + [t[:500] for t in tail]
    return [t[:500] for t in tail]


def refused_signature(message: str) -> Signature:
    """A FlagSet refusal as a signature: the first clause (flag + what is wrong)."""
    head = message.split(";")[0]
    head = re.sub(r"\s*\(srt/server_args\.py\)", "", head)
    return Signature("refused", normalise(head), message[:500])
