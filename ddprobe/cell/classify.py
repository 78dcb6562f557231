"""Classify one cell from what was seen: the process, its log and the probe report (pure).

Rules, in order (infrastructure is never blamed on the server):
  launch command broken (interpreter/module not found), port in use  -> error
  the server's argparse or its argument checks refused the flags    -> refused
  (server_args.py, srt/arg_groups/*.py on 0.5.21+, speculative/spec_info.py)
  a failure line after the server started serving, process alive or not -> crash / hang
  process died / fatal signature in the log                  -> crash (signature from the log)
  never healthy before the deadline, or the log stalled             -> hang
  alive, no probe answered: health bad -> crash (errors) / hang (timeouts), else error (network)
  a garbage-class signature (NaN) / coding failures / junk / divergence -> garbage
  tok/s below ratio x baseline tok/s                                -> degraded
  else                                                              -> ok

Whether the server's process still lingers never decides a crash: SGLang's HTTP front often
outlives its scheduler, so the same log gives the same outcome whenever the process exits.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ddprobe.probes.runner import ProbeReport, TaskResult
from ddprobe.results import SIGNATURE_LINE_CAP, Outcome, Signature
from ddprobe.signatures import (
    LogMatch,
    best_match,
    classify_phase,
    find_matches,
    load_catalogue,
    normalise,
    serving_start,
    strip_prefix,
)
from ddprobe.signatures.decode import summarise_decode
from ddprobe.untrusted import clean, first_chars

# bounds on the host text a classification keeps (Signature.line: results.SIGNATURE_LINE_CAP)
LAUNCH_LINE_CAP: Final = 300  # the log line that says the launch command itself is broken
UNKNOWN_KEY_CAP: Final = 160  # the normalised line that keys an unknown failure
NOTE_LINE_CAP: Final = 200  # a log line quoted in a note
EXCERPT_LINE_CAP: Final = 500  # each line of a cell's log excerpt


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
        texts = cell.answers
        return cls(tok_s=p.tok_s if p else None, passed=p.passed if p else None,
                   total=p.total if p else None, texts=dict(texts) if texts else None,
                   key=cell.config.key)


@dataclass(frozen=True)
class Classification:
    """What a cell's server did, as classified from its log and probes (not a bisect verdict:
    that is `results.Verdict`)."""

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
                return first_chars(line.strip(), LAUNCH_LINE_CAP)
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
    return Signature("refused", normalise(m.group("msg").strip()),
                     first_chars(m.group(0).strip(), SIGNATURE_LINE_CAP))


def _sig_from_log(log: str, since: int = 0) -> tuple[LogMatch | None, Signature | None]:
    m = best_match(log, since=since)
    return m, (m.signature if m else None)


# Where a release validates its arguments: a traceback whose innermost frame is one of these
# (and whose exception is a validation error) is the server refusing the configuration.
_ARG_FRAMES = re.compile(
    r"(?:^|/)(?:srt/server_args\.py|server_args\.py|srt/arg_groups/[\w/]+\.py"
    r"|speculative/spec_info\.py|vllm/engine/arg_utils\.py|vllm/config/[\w/]+\.py):")
_ARG_EXCEPTIONS = frozenset({"ValueError", "AssertionError", "NotImplementedError", "TypeError",
                             "RuntimeError", "argparse.ArgumentTypeError", "ArgumentTypeError",
                             "ValidationError", "pydantic_core._pydantic_core.ValidationError"})


def is_refusal(m: LogMatch | None) -> bool:
    """The server's own argument checks refused the configuration (not a crash)."""
    if m is None:
        return False
    if m.outcome == "refused":
        return True
    d = m.details_dict
    return m.signature.kind == "traceback" and m.phase == "startup" and \
        d.get("exception", "") in _ARG_EXCEPTIONS and bool(_ARG_FRAMES.search(d.get("frame", "")))


_ERRORISH = re.compile(r"(?:\b[A-Z]\w*(?:Error|Exception)\b|\berror\b|\bfailed\b|\bFailed\b"
                       r"|\bFATAL\b|\bfatal\b|\bKilled\b|\baborted\b)")


def unknown_signature(log: str, during: str, kind: str = "exit") -> Signature:
    """A failure nothing in the catalogue explains, keyed on its own text (the last error-like
    line, normalised) so two different unknown failures are two bisect modes, not one."""
    phase = classify_phase(log) if log else "startup"
    lines = [strip_prefix(ln).strip() for ln in log.splitlines()]
    lines = [ln for ln in lines if ln]
    for ln in reversed(lines[-200:]):
        if _ERRORISH.search(ln):
            return Signature(kind, f"{first_chars(normalise(ln), UNKNOWN_KEY_CAP)} ({phase})",
                             first_chars(ln, SIGNATURE_LINE_CAP))
    tail = lines[-1] if lines else ""
    what = "exited" if kind == "exit" else "stopped"
    return Signature(kind, f"server {what} during {during} ({phase}) with no error in its log",
                     first_chars(tail, SIGNATURE_LINE_CAP))


def implied_phase(m: LogMatch) -> str:
    """The phase the matched message itself implies (catalogue `phase`), or ""."""
    try:
        return load_catalogue().entry(m.entry).phase
    except KeyError:
        return ""


# Start-up tracebacks SGLang prints and carries on after: an optional dependency that is not
# installed (e.g. `ModuleNotFoundError: No module named 'openai_harmony'`, a tool parser's
# import). Nothing else logged before the ready line is ever "survived".
_SURVIVABLE_EXC = re.compile(r"^(?:ModuleNotFoundError|ImportError)\b")


def survivable(m: LogMatch, log: str) -> bool:
    """Whether a failure logged before the server got ready can be one it carried on after: a
    non-fatal traceback of a missing optional module, with a sign of life after it (the ready
    line, a batch, a request). A fatal
    GPU error, a component's exception, a child's death, any other traceback, and a log that
    ends in its traceback are never survived."""
    if m.severity == "fatal" or m.signature.kind != "traceback":
        return False
    exc = m.details_dict.get("exception", "") or m.signature.key
    rest = "\n".join(log.splitlines()[m.line_no:])
    return bool(_SURVIVABLE_EXC.match(exc)) and serving_start(rest, frames=False) is not None


def serving_failure(log: str) -> LogMatch | None:
    """The first catalogued failure logged after the server started serving (its ready line,
    first batch or request), of any severity: a traceback there is a crash while serving."""
    start = serving_start(log)
    # after the first line that says so (the ready line, a batch, a request); when a
    # traceback's event-loop frames say it first, or only the message itself does (`Decode out
    # of memory`), each match is judged on its own phase
    ready = serving_start(log, frames=False)
    since = ready if ready is not None and ready == start else 0
    lines = log.splitlines()
    matches = find_matches(log, since=since or 0)
    if since:  # a message that itself says "while serving" counts wherever it is
        matches += [m for m in find_matches(log) if m.line_no - 1 < since
                    and implied_phase(m) == "serving"]
    if any(m.phase == "startup" and implied_phase(m) == "startup" for m in matches):
        return None  # the message says start-up never finished (a failed warmup)
    for m in matches:
        if m.outcome not in ("crash", "hang", "error") or m.phase == "startup":
            continue
        if m.severity != "fatal" and any(_BATCH.search(ln) for ln in lines[m.line_no:]):
            continue  # a request's traceback the scheduler survived: it kept running batches
        return m
    return None


_BATCH = re.compile(r"\b(?:Decode|Prefill) batch\b")


def classify_dead(log: str, *, package: str, during: str) -> Classification:
    """The server exited (or logged a fatal line) during `during` (start-up | serving)."""
    broken = launch_failure(log, package)
    if broken:
        return Classification(Outcome.ERROR,
                              error=f"the launch command failed on the host: {broken}")
    refused = argparse_refusal(log)
    if refused is not None:
        raw = refused.line.split(": error: ", 1)[-1]
        return Classification(Outcome.REFUSED, refused, f"the server refused the flags: {raw}")
    m = serving_failure(log) if during == "serving" else None
    if m is None:
        m, _ = _sig_from_log(log)
    return _from_match(m, log, during)


def _from_match(m: LogMatch | None, log: str, during: str) -> Classification:
    notes = evidence_notes(log)
    if is_refusal(m):
        assert m is not None  # a ValueError from the server's own checks is a refusal
        return Classification(Outcome.REFUSED, m.signature,
                       f"the server refused the flags: {m.signature.line}", m, notes)
    if m is not None and m.outcome == "error":
        return Classification(Outcome.ERROR, error=f"infrastructure: {m.signature.line} ({m.hint})",
                       match=m, notes=notes)
    if m is not None and m.outcome == "hang":
        return Classification(Outcome.HANG, m.signature, None, m, notes)
    if m is None:
        return Classification(Outcome.CRASH, unknown_signature(log, during), None, None, notes)
    return Classification(Outcome.CRASH, m.signature, None, m, notes)


def _last_event(log: str, m: LogMatch, *, slack: int = 5) -> bool:
    """Nothing but the rest of its traceback (and a few lines) follows the match: the server
    did not carry on after it."""
    after = 0
    for line in log.splitlines()[m.line_no:]:
        t = strip_prefix(line)
        if not t.strip() or t.startswith((" ", "\t", "During handling")) \
                or "Traceback (most recent" in t:
            continue
        after += 1
    return after <= slack


def evidence_notes(log: str) -> tuple[str, ...]:
    """Lines that are evidence without being the key: the driver's Xid lines."""
    out = []
    for m in find_matches(log):
        if m.signature.kind == "xid":
            line = first_chars(m.signature.line, NOTE_LINE_CAP)
            out.append(f"driver Xid in the log: {line} ({m.signature.key})")
    return tuple(dict.fromkeys(out))


def classify_hang(log: str, timeout: float, *, stalled: float | None = None) -> Classification:
    """Never healthy: the deadline passed, or (`stalled` seconds) the log stopped growing."""
    m, sig = _sig_from_log(log)
    if m is not None and (m.outcome == "error" or is_refusal(m)):
        return _from_match(m, log, "start-up")
    why = f"not healthy after {timeout:g}s" if stalled is None else \
        f"the log stopped progressing for {stalled:g}s during start-up"
    if m is not None and sig is not None and m.outcome == "crash" and _last_event(log, m):
        # the log ends in a failure: the process outlived it (a parent waiting on a dead child)
        return Classification(Outcome.CRASH, sig, None, m, (
            f"{why}: the process outlived the failure its log ends with",
            *evidence_notes(log)))
    notes = evidence_notes(log)
    if m is not None and m.outcome == "crash":
        # the server carried on after it: not what it hangs on
        notes = ("logged during start-up and survived: "
                 f"{first_chars(m.signature.line, NOTE_LINE_CAP)}", *notes)
    if sig is None or m is None or m.outcome != "hang":
        phase = classify_phase(log) if log else "startup"
        tail = [ln for ln in log.splitlines() if ln.strip()]
        key = f"not healthy before the deadline ({phase})" if stalled is None else \
            f"start-up stalled ({phase})"
        sig = Signature("hang", key,
                        first_chars(tail[-1].strip(), SIGNATURE_LINE_CAP) if tail else "")
        m = None
    return Classification(Outcome.HANG, sig, why, m, notes)


def garbage_signature(report: ProbeReport, log: str = "") -> Signature:
    s = report.summary
    acc = "n/a" if s.accept_length is None else f"{s.accept_length:.2f}"
    if s.accept_length is None and log:
        # HTTP said nothing about acceptance: the scheduler's decode lines are the evidence
        d = summarise_decode(log)
        if d is not None and d.collapsed_with_graphs:
            acc = "1.00 (log, cuda graph)"
        elif d is not None and d.accept_len_mean is not None:
            acc = f"{d.accept_len_mean:.2f} (log)"
    key = f"accept_length={acc} coding {s.passed}/{s.total}"
    if s.divergence:
        key += " divergence"
    why = "; ".join([*s.garbage_flags, *(s.failures[:2])])
    return Signature("garbage", key, first_chars(why, SIGNATURE_LINE_CAP))


def classify_served(report: ProbeReport, *, alive: bool, log: str, package: str,
                    baseline: Baseline | None, ratio: float,
                    health: str | None = None) -> Classification:
    """After probes: the server came up; decide from the log, the server and the answers.

    `health` is how /health_generate answered after the probes (ok | error | timeout; None
    when not asked). A failure in the log after the ready line is a crash (or hang) whether
    or not the process is still there; the process's death alone is one too."""
    m = serving_failure(log)
    logged = _logged_failure(m, report, alive=alive, health=health, log=log)
    if logged is not None:
        return logged
    if not alive:
        return classify_dead(log, package=package, during="serving")
    errored = [r for r in report.results if r.errors and not r.text]
    if report.results and len(errored) == len(report.results):
        return _no_probe_answered(errored, health, log)
    return _judge_answers(report, m, log, baseline, ratio)


def _logged_failure(m: LogMatch | None, report: ProbeReport, *, alive: bool, health: str | None,
                    log: str) -> Classification | None:
    """The failure the log shows after the ready line, unless the server survived it (a
    non-fatal traceback while every probe was answered and passed) or it is a refusal."""
    if m is None:
        return None
    results = report.results
    answered_well = bool(results) and not any(r.errors and not r.text for r in results) \
        and health in (None, "ok") and alive
    if m.severity != "fatal" and answered_well and report.summary.passed == \
            report.summary.total:
        return None  # a logged traceback the server survived (a request it rejected): evidence
    return None if is_refusal(m) else _from_match(m, log, "serving")


def _no_probe_answered(errored: list[TaskResult], health: str | None,
                       log: str) -> Classification:
    """The server is alive and no probe got an answer: crash, hang or an error of the run."""
    reason = errored[0].errors[0] if errored[0].errors else errored[0].reason
    if health == "error":
        sig = Signature("health", "health turned bad while serving",
                        first_chars(reason, SIGNATURE_LINE_CAP))
        return Classification(Outcome.CRASH, sig, None, None, evidence_notes(log))
    if health == "timeout" or all("timed out" in " ".join(r.errors).lower() for r in errored):
        sig = Signature("hang", "no probe answered before its timeout",
                        first_chars(reason, SIGNATURE_LINE_CAP))
        return Classification(Outcome.HANG, sig, reason)
    return Classification(Outcome.ERROR,
                          error=f"no probe got an answer (server alive): {reason}")


def _judge_answers(report: ProbeReport, m: LogMatch | None, log: str, baseline: Baseline | None,
                   ratio: float) -> Classification:
    """The probes were answered: garbage (by the log or the answers), degraded, or ok."""
    s = report.summary
    notes = tuple(s.notes)
    if m is not None:
        notes += (f"a traceback was logged while serving, but the server kept answering: "
                  f"{first_chars(m.signature.line, NOTE_LINE_CAP)}",)
    g, gsig = _sig_from_log(log)
    if g is not None and g.outcome == "garbage":
        return Classification(Outcome.GARBAGE, gsig, None, g, notes)
    if s.passed < _passes_wanted(report, baseline) or s.garbage_flags or s.divergence:
        return Classification(Outcome.GARBAGE, garbage_signature(report, log), None, None, notes)
    slow = _below_baseline(report, baseline, ratio)
    if slow is not None:
        return Classification(Outcome.DEGRADED, slow, None, None, notes)
    return Classification(Outcome.OK, None, None, None, notes)


def _passes_wanted(report: ProbeReport, baseline: Baseline | None) -> int:
    """Every probe, or as many as the baseline passed on the same probes (it sets the bar)."""
    s = report.summary
    if baseline is not None and baseline.passed is not None and baseline.total == s.total:
        return min(s.total, baseline.passed)
    return s.total


def _below_baseline(report: ProbeReport, baseline: Baseline | None,
                    ratio: float) -> Signature | None:
    s = report.summary
    if baseline is None or not baseline.tok_s or s.tok_s is None \
            or s.tok_s >= ratio * baseline.tok_s:
        return None
    line = (f"tok/s {s.tok_s:.1f} < {ratio:g} x baseline {baseline.tok_s:.1f}"
            + (f" ({baseline.key})" if baseline.key else ""))
    return Signature("degraded", f"tok/s below {ratio:g} x baseline", line)


def excerpt(log: str, sig: Signature | None, *, lines: int = 25) -> list[str]:
    """The log's tail, with the signature's line first when the tail does not show it, and
    before both the frames of the first exception of the last traceback chain when the tail
    starts after them (0.5.11 re-raises a capture failure as `Capture cuda graph failed`: the
    frames where it failed come first in the log, and the bisect ranks suspects by them).
    Each part the tail does not continue is followed by a line `...`."""
    # cleaned: the excerpt goes to journals, reports, JUnit and the terminal (ddprobe/untrusted.py)
    all_lines = [ln.rstrip() for ln in clean(log).splitlines() if ln.strip()]
    tail = all_lines[-lines:]
    head = _chain_head(all_lines, len(all_lines) - len(tail))
    if sig is not None and sig.line and not any(sig.line in ln for ln in tail):
        for ln in all_lines:
            if sig.line in ln:
                head += [ln, "..."]
                break
    return [first_chars(t, EXCERPT_LINE_CAP) for t in [*head, *tail]]


# the lines Python prints between the tracebacks of a chain of exceptions
CHAINED: Final = ("During handling of the above exception",
                  "The above exception was the direct cause")
_HEAD_FRAMES: Final = 12


def _chain_head(all_lines: list[str], tail_start: int) -> list[str]:
    """The first traceback of the log's last chain, as its header, its innermost frames'
    `File` lines (torch's own left out) and its exception line, then `...`: [] when the tail
    shows that header or the log has no chained traceback."""
    starts = [i for i, ln in enumerate(all_lines) if "Traceback (most recent call last)" in ln]
    first = None
    for a, b in zip(reversed(starts[:-1]), reversed(starts[1:]), strict=True):
        if not any(c in ln for ln in all_lines[a:b] for c in CHAINED):
            break
        first = a
    if first is None or first >= tail_start:
        return []
    end = next(i for i in starts if i > first)
    body = all_lines[first + 1:end]
    # torch's own frames (nn.Module's call wrappers, decorators) hold no server buffer's use
    frames = [ln for ln in body if ln.lstrip().startswith('File "')
              and "/site-packages/torch/" not in ln][-_HEAD_FRAMES:]
    exc = [ln for ln in body if ln[:1].isalpha() and not any(c in ln for c in CHAINED)][-1:]
    return [all_lines[first], *frames, *exc, "..."]


def refused_signature(message: str) -> Signature:
    """A FlagSet refusal as a signature: the first clause (flag + what is wrong)."""
    head = message.split(";")[0]
    head = re.sub(r"\s*\(srt/server_args\.py\)", "", head)
    return Signature("refused", normalise(head), first_chars(message, SIGNATURE_LINE_CAP))
