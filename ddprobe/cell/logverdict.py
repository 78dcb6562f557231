"""Classify a server log on its own, without running a cell (`ddprobe classify FILE|-`).

The same rules as a cell (cell/classify.py), with only the log to go on: no process to ask,
no probes, no health endpoint. What the log cannot say is said: a log that ends during start-up
with no failure is `incomplete` (still starting, hung, or cut short), never `ok`.

    v = classify_log(Path("ticket.log").read_text())
    v.outcome, v.signature, v.phase, v.hint, v.decode
    suspect(v)  # why an ok log is still doubtful (None: no reason seen)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from ddprobe.cell.classify import (
    argparse_refusal,
    classify_dead,
    evidence_notes,
    implied_phase,
    launch_failure,
    serving_failure,
    survivable,
)
from ddprobe.results import Signature
from ddprobe.signatures import LogMatch, classify_phase, find_matches, serving_start
from ddprobe.signatures.decode import DecodeSummary, decode_notes, summarise_decode
from ddprobe.untrusted import first_chars

NOTE_LINE_CAP: Final = 160  # characters of a log line a note quotes

# the outcomes a log alone can give (a cell adds degraded, and decides incomplete ones)
LOG_OUTCOMES: Final = ("ok", "crash", "hang", "refused", "garbage", "error", "incomplete")


@dataclass(frozen=True)
class LogVerdict:
    outcome: str  # one of LOG_OUTCOMES
    phase: str  # startup | capture | serving
    signature: Signature | None = None
    hint: str = ""
    line_no: int | None = None  # 1-based line of the signature's key line
    entry: str = ""  # the catalogue entry that matched
    details: dict[str, str] = field(default_factory=dict)
    decode: DecodeSummary | None = None
    notes: tuple[str, ...] = ()
    reached_serving: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "phase": self.phase,
                "signature": self.signature.to_dict() if self.signature else None,
                "hint": self.hint, "line": self.line_no, "entry": self.entry,
                "details": dict(self.details), "reached_serving": self.reached_serving,
                "decode": self.decode.to_dict() if self.decode else None,
                "notes": list(self.notes)}


def classify_log(text: str, *, package: str = "sglang") -> LogVerdict:
    """The outcome, signature, phase and hint of one log, and its decode lines."""
    decode = summarise_decode(text)
    served = serving_start(text) is not None and not any(
        m.phase == "startup" and implied_phase(m) == "startup" for m in find_matches(text))
    v = _verdict(text, package, served)
    http_notes = decode_notes(decode, http_accept=None)
    return LogVerdict(v.outcome, v.phase, v.signature, v.hint, v.line_no, v.entry, v.details,
                      decode, (*v.notes, *evidence_notes(text), *http_notes), served)


def suspect(v: LogVerdict) -> str | None:
    """Why an `ok` log is not a clean bill: its decode lines show acceptance collapsed to 1.0
    with CUDA graphs on (the seed's garbage looked like that). The log alone cannot prove the
    answers wrong (exit 0 stays): probing the server decides."""
    d = v.decode
    if v.outcome != "ok" or d is None or not d.collapsed_with_graphs:
        return None
    return ("acceptance collapsed to 1.00 on every decode line with CUDA graphs on: the answers "
            "may be garbage (a stale graph buffer looks like this); `ddprobe probe` decides")


def _verdict(text: str, package: str, served: bool) -> LogVerdict:
    broken = launch_failure(text, package)
    if broken:
        return LogVerdict("error", "startup", Signature("launch", "the launch command failed",
                                                        broken),
                          hint="the host's launch command is broken (interpreter or module "
                               "not found): infrastructure, not the server")
    refused = argparse_refusal(text)
    if refused is not None:
        return LogVerdict("refused", "startup", refused,
                          hint="the server's argparse refused the flags")
    if served:
        m = serving_failure(text)
        if m is not None:
            return _from(m)
        garbage = [x for x in find_matches(text) if x.outcome == "garbage"]
        if garbage:
            return _from(garbage[0])
        before = [x for x in find_matches(text) if x.outcome in ("crash", "hang")]
        fatal = [x for x in before if not survivable(x, text)]
        if fatal:
            # a fatal GPU error, a component's exception, a traceback the log ends in: the
            # serving markers around it (the HTTP front answering on) are no sign of life
            return _from(fatal[0])
        notes = tuple(f"logged before the server got ready, and survived (a missing optional "
                      f"module): {first_chars(x.signature.line, NOTE_LINE_CAP)}"
                      for x in before[:3])
        return LogVerdict("ok", "serving", notes=notes, reached_serving=True)
    if find_matches(text, first_only=True):
        # the rules a dead cell's log goes through (refusal frames, infrastructure, hangs)
        d = classify_dead(text, package=package, during="start-up")
        if d.match is not None:
            return _from(d.match, d.outcome.value)
        if d.signature is not None:
            return LogVerdict(d.outcome.value, "startup", d.signature, notes=d.notes)
    phase = classify_phase(text) if text.strip() else "startup"
    return LogVerdict("incomplete", phase, notes=(
        "the log ends during start-up with no failure in it: the server was still starting, "
        "hung, or the log was cut short; a run cell (health wait, stall window) decides",))


def _from(m: LogMatch, outcome: str | None = None) -> LogVerdict:
    return LogVerdict(outcome or m.outcome, m.phase, m.signature, m.hint, m.line_no, m.entry,
                      m.details_dict, reached_serving=m.phase == "serving")
