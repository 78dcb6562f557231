"""The typed records that cross layers: a server config, a cell's outcome, a signature.

Every layer above `experiment` (bisect, sweep, smoke, reports, the run store) speaks these.
They serialise to plain dicts (`to_dict` / `from_dict`) for the journal and `--json`.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Final, Literal, TypedDict, get_args

from ddprobe.effective import EffectiveConfig

# The vocabularies of the records, each declared once as a Literal and written as the bare
# string. Where one comes in (a journal, a run dir, a flag), `known()` checks it.
# why the planner wanted a cell (PlannedCell.purpose, CellResult.purpose)
Purpose = Literal["frontier", "eager", "oversize", "max_bs", "sanitize", "confirm", "sweep",
                  "smoke", "compare", "residual"]
CellKind = Literal["cell", "sanitize"]  # CellResult.kind: a probe cell or a memcheck cell
# a verdict's diagnosis (Verdict.kind) and how sure it is
VerdictKind = Literal["buffer_sizing", "graph_capture", "kernel", "config_error",
                      "inconclusive", "flaky", "ok"]
VERDICT_KINDS: Final[tuple[VerdictKind, ...]] = get_args(VerdictKind)
Confidence = Literal["high", "medium", "low"]
# why a verdict is inconclusive or not restarted (Verdict.reason; "" for a decided one)
VerdictReason = Literal["", "preload", "preload-graph", "eager-differs", "graph-undecided",
                        "no-evidence", "unfinished", "assumed", "infrastructure",
                        "nondeterministic", "not-decisive"]
# what a piece of evidence rests on (Evidence.kind): an experiment's cells (frontier, eager,
# control, oversize, max_bs, sanitize, memcheck, latent, patch, differential), the log
# (signature), the sources (static), or the run itself (assumed, repeat, refused, skip, note);
# residual: what a cured cell shows (a second defect, bisect/residual.py)
EvidenceKind = Literal["frontier", "eager", "control", "oversize", "max_bs", "sanitize",
                       "memcheck", "latent", "patch", "differential", "signature", "static",
                       "assumed", "repeat", "refused", "skip", "note", "residual"]
# what a verdict advises (Advice.kind): one sentence each, rendered by ddprobe.bisect.advice
AdviceKind = Literal["works", "works_assumed", "kernel", "graph_capture", "workspace", "buffer",
                     "inconclusive", "unstarted", "flaky", "config_error", "assumed",
                     "infrastructure", "latent", "latent_foreign", "diverged",
                     "nondeterministic", "fixed", "works_unchecked"]

class UnknownValue(ValueError):
    """A value read from outside (a journal, a flag) that its vocabulary does not hold. The
    reader that knows the file adds where (store.load_run: path and line)."""

    def __init__(self, key: str, value: object, allowed: tuple[str, ...]) -> None:
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"unknown {key} {value!r} (known: {', '.join(allowed)})")


def known(vocabulary: Any, value: object, key: str) -> Any:
    """`value` when it is one of the Literal `vocabulary`'s strings, else `UnknownValue`
    naming `key`. Typed by the caller's field: `kind: VerdictKind = known(VerdictKind, ...)`."""
    allowed: tuple[str, ...] = get_args(vocabulary)
    if value not in allowed:
        raise UnknownValue(key, value, allowed)
    return value


class Outcome(str, Enum):
    OK = "ok"
    CRASH = "crash"  # the server process died / start-up failed with a server-side error
    GARBAGE = "garbage"  # server up, but output wrong (coding tests fail, divergence, junk)
    HANG = "hang"  # never became healthy before the deadline
    DEGRADED = "degraded"  # correct but tok/s below the threshold against a baseline
    REFUSED = "refused"  # the flags were refused (before restart, or by the server's argparse)
    ERROR = "error"  # infrastructure: ssh drop, port in use, disk full... never SGLang's fault

    @property
    def bad(self) -> bool:
        return self in (Outcome.CRASH, Outcome.GARBAGE, Outcome.HANG, Outcome.DEGRADED)


@dataclass(frozen=True)
class Config:
    """One server configuration. `budget` is the draft-tree budget (draft tokens = budget + 1)."""

    budget: int
    graph: bool = True
    max_bs: int | None = None
    backend: str | None = None
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        parts = [f"b{self.budget}", "graph" if self.graph else "eager"]
        if self.max_bs is not None:
            parts.append(f"bs{self.max_bs}")
        if self.backend:
            parts.append(self.backend)
        if self.extra_args:
            digest = hashlib.sha1("\0".join(self.extra_args).encode()).hexdigest()[:6]
            parts.append("x" + digest)
        return "-".join(parts)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["extra_args"] = list(self.extra_args)
        # names only: a value may be a secret (HF_TOKEN), and this dict is written to journals,
        # reports and the host's server.json; from_dict reads the values back from os.environ
        d["env"] = sorted(k for k, _ in self.env)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Config:
        return cls(budget=int(d["budget"]), graph=bool(d.get("graph", True)),
                   max_bs=d.get("max_bs"), backend=d.get("backend"),
                   extra_args=tuple(d.get("extra_args") or ()),
                   env=_env_from(d.get("env")))


def _env_from(raw: Any) -> tuple[tuple[str, str], ...]:
    """A recorded env: names (values re-read from this process's environment; a name that is
    not set here is dropped) or, from a journal of an older ddprobe, a name -> value dict."""
    if isinstance(raw, dict):
        return tuple(sorted((str(k), str(v)) for k, v in raw.items()))
    names = [str(k) for k in raw or ()]
    return tuple(sorted((k, os.environ[k]) for k in names if k in os.environ))


SIGNATURE_LINE_CAP: Final = 500  # characters of a log line (or reason) a Signature keeps


@dataclass(frozen=True)
class Signature:
    """A normalised failure fingerprint: class + key line with addresses/pids/times stripped."""

    # an open set: the catalogue's kinds (ddprobe/signatures/catalogue.yaml), which a newer
    # catalogue extends, plus "garbage", "degraded", "capture", "traceback", ...
    kind: str
    key: str  # normalised key line
    line: str = ""  # the raw line it came from (for evidence)

    @property
    def id(self) -> str:
        return f"{self.kind}: {self.key}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Signature | None:
        return None if d is None else cls(**d)


@dataclass
class ProbeSummary:
    passed: int = 0
    total: int = 0
    accept_length: float | None = None  # from /generate meta_info (mean over requests)
    accept_source: str = ""  # "spec_accept_length" | "completion_tokens/spec_verify_ct" | ""
    server_accept_length: float | None = None  # /server_info internal_states avg_spec_accept_length
    tok_s: float | None = None  # median per-request output tok/s
    aggregate_tok_s: float | None = None
    latency_s: float | None = None  # median e2e latency
    garbage_flags: list[str] = field(default_factory=list)  # why output looked like garbage
    divergence: str | None = None  # differential check vs baseline: first differing position
    failures: list[str] = field(default_factory=list)  # per-task failure reasons (short)
    notes: list[str] = field(default_factory=list)
    # the most requests the probe had in flight at once (its own count): no batch the server
    # ran during the probe held more, so no captured graph of a larger batch size replayed
    peak_requests: int | None = None

    @property
    def label(self) -> str:
        return f"coding {self.passed}/{self.total}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.peak_requests is None:  # not counted (journals written before it existed)
            del d["peak_requests"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> ProbeSummary | None:
        return None if d is None else cls(**d)


# The typed fields below are written under "extra" in the journal and in `--json`, the form
# every earlier version wrote, so old run dirs load and `--json` readers see the same document.
# field name -> key under "extra"
_WIRE: Final[dict[str, str]] = {
    # every cell
    "wall_s": "wall_s", "local_log": "local_log", "error_kind": "error_kind", "hint": "hint",
    "phase": "phase", "log_signature": "log_signature", "details": "details",
    "launch": "launch", "env_names": "env", "flags_checked": "flags_checked",
    "preflight": "preflight", "stop": "stop", "health": "health",
    "health_after_probes": "health_after_probes", "cleanup": "cleanup",
    "server_info_path": "server_info_path", "probe_check_s": "probe_check_s",
    "model_loaded": "model_loaded", "decode": "decode", "xid": "xid",
    "answers": "answers", "answer_ids": "answer_ids", "differential": "differential",
    "phases": "phases", "cheap": "cheap",
    # plan metadata (set by the bisect engine)
    "plan": "plan", "group": "group", "round": "round", "purpose": "purpose",
    # a sanitize cell
    "sanitizer": "sanitizer", "buffer": "buffer", "buffer_match": "buffer_match",
    "sizing": "sizing", "answered": "answered",
}


@dataclass
class CellResult:
    host: str
    config: Config
    outcome: Outcome
    signature: Signature | None = None
    probes: ProbeSummary | None = None
    timings: dict[str, float] = field(default_factory=dict)  # restart, health, probe, total
    log_excerpt: list[str] = field(default_factory=list)
    error: str | None = None  # for ERROR/REFUSED: the reason in one line
    log_path: str | None = None  # server log of this cell on the host
    started_at: str = ""
    patches: list[str] = field(default_factory=list)  # patch ids applied during the cell
    kind: CellKind = "cell"
    # what the server said it runs (/server_info + the capture log line), or the preflight's
    # answer when it never answered; None in journals written before it existed
    effective: EffectiveConfig | None = None
    notes: list[str] = field(default_factory=list)  # what a reader should know, one line each
    # every field below is None when not known (and then not written)
    wall_s: float | None = None  # the cell's wall time as the executor saw it
    local_log: str | None = None  # the server log copied into the run dir
    error_kind: str | None = None  # an ERROR cell: unreachable | disk | server | ...
    hint: str | None = None  # the matched log pattern's advice
    phase: str | None = None  # where it failed: start-up, capture, decode, ...
    log_signature: str | None = None  # Signature.id of the matched log line (also for ERROR)
    details: dict[str, Any] | None = None  # the log match's details (e.g. sizes in the line)
    launch: list[str] | None = None  # the argv the server was started with
    env_names: list[str] | None = None  # names of the launch's env (values are secret)
    flags_checked: bool | None = None  # the flags were checked against the server's argparse
    preflight: str | None = None  # the preflight's status for this config
    stop: dict[str, Any] | None = None  # StopResult.to_dict() of the previous server
    health: dict[str, Any] | None = None  # status, elapsed, stage, polls, peeks
    health_after_probes: Any = None  # health_now() after a probe error
    cleanup: dict[str, Any] | None = None  # StopResult.to_dict() of the cell's own server
    server_info_path: str | None = None  # /server_info or /get_server_info
    probe_check_s: float | None = None  # seconds spent checking the answers
    model_loaded: bool | None = None  # the log says the weights were loaded
    decode: dict[str, Any] | None = None  # DecodeSummary.to_dict() from the server's log
    xid: list[str] | None = None  # NVIDIA Xid kernel-log lines during the cell
    answers: dict[str, str] | None = None  # task id -> answer text (a baseline, differential)
    answer_ids: dict[str, Any] | None = None  # task id -> output token ids
    differential: dict[str, Any] | None = None  # the graph/eager comparison of this cell
    # seconds per phase (start, load, capture, health, probes, stop) and which the server's
    # log stated (cell.phases.CellPhases.to_dict())
    phases: dict[str, Any] | None = None
    cheap: bool | None = None  # ran cheap (dummy weights, few captured sizes, short probe)
    plan: dict[str, Any] | None = None  # PlannedCell.to_dict() of the cell the planner wanted
    group: str | None = None  # the host group's key
    round: int | None = None  # the bisect round it ran in
    purpose: Purpose | None = None  # why the planner wanted it
    sanitizer: dict[str, Any] | None = None  # SanitizerReport.to_dict() (a sanitize cell)
    buffer: dict[str, Any] | None = None  # the grep-buffers row sized as the allocation
    buffer_match: str | None = None  # how the buffer was (or was not) named
    sizing: dict[str, Any] | None = None  # the sizing parameters the buffer was matched with
    answered: bool | None = None  # the sanitized server answered a request
    # keys of journals this version does not read (e.g. `effective`, `captured_bs` of older
    # versions): kept so that they are written back unchanged
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host, "config": self.config.to_dict(), "outcome": self.outcome.value,
            "signature": self.signature.to_dict() if self.signature else None,
            "probes": self.probes.to_dict() if self.probes else None,
            "timings": self.timings, "log_excerpt": self.log_excerpt, "error": self.error,
            "log_path": self.log_path, "started_at": self.started_at, "patches": self.patches,
            "kind": self.kind, "extra": self._wire_extra(),
            "effective": self.effective.to_dict() if self.effective else None,
        }

    def _wire_extra(self) -> dict[str, Any]:
        wire = dict(self.extra)
        wire["notes"] = self.notes
        for name, key in _WIRE.items():
            value = getattr(self, name)
            if value is not None:
                wire[key] = value
        return wire

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CellResult:
        extra = dict(d.get("extra") or {})
        notes = list(extra.pop("notes", None) or [])
        typed = {name: extra.pop(key) for name, key in _WIRE.items() if key in extra}
        if "purpose" in typed:
            typed["purpose"] = known(Purpose, typed["purpose"], "cell.extra.purpose")
        return cls(host=d["host"], config=Config.from_dict(d["config"]),
                   outcome=_outcome(d["outcome"]),
                   signature=Signature.from_dict(d.get("signature")),
                   probes=ProbeSummary.from_dict(d.get("probes")), timings=d.get("timings") or {},
                   log_excerpt=d.get("log_excerpt") or [], error=d.get("error"),
                   log_path=d.get("log_path"), started_at=d.get("started_at", ""),
                   patches=d.get("patches") or [],
                   kind=known(CellKind, d.get("kind", "cell"), "cell.kind"),
                   effective=EffectiveConfig.from_dict(d.get("effective")),
                   notes=notes, extra=extra, **typed)


def _outcome(value: object) -> Outcome:
    try:
        return Outcome(value)
    except ValueError:
        raise UnknownValue("cell.outcome", value, tuple(o.value for o in Outcome)) from None


class EvidenceDetails(TypedDict, total=False):
    """What a piece of evidence carries besides its line (Evidence.details): every key a
    verdict writes, typed (None where a caller has nothing: such keys are not written).
    Journals of other versions may hold keys not listed here."""

    line: str | None  # the log line of the signature
    log: list[str] | None  # the log's last lines
    log_path: str | None
    phase: str | None
    buffers: list[Any] | None  # grep-buffers rows (static), or the enlarged names (oversize)
    patches: list[Any] | None  # the temporary patches an oversize cell applied
    differential: dict[str, Any] | None  # Differential.to_dict()
    findings: Any  # the sanitizer report of a memcheck cell
    latent: str | None  # a latent judgement's status (LatentStatus) or "off"
    why: str | None  # why the latent check could not run
    budget: int | None
    capacity: dict[str, Any] | None  # what the oversize factors proved about a capacity
    repeats: list[Any] | None  # the graph/eager comparisons of repeated cells
    # which captured graphs a comparison replayed: peak_requests, max_captured_bs
    batch_coverage: dict[str, int] | None


@dataclass
class NextCommand:
    """The command a verdict says to run next, as argv (rendered by ddprobe.bisect.advice)."""

    argv: list[str]
    then: list[str] = field(default_factory=list)  # a second command, after the first
    note: str = ""  # a shell comment after it

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> NextCommand | None:
        if not d:
            return None
        return cls([str(x) for x in d.get("argv") or []], [str(x) for x in d.get("then") or []],
                   str(d.get("note") or ""))


@dataclass
class Advice:
    """What a verdict advises, as data; `ddprobe.bisect.advice.render` writes its sentence."""

    kind: AdviceKind
    at: int | None = None  # the budget the diagnosis ran at
    keep: int | None = None  # keep budgets <= this with CUDA graphs (None: none passed)
    unsafe: int | None = None  # the keep budget the latent check lowered (writes out of bounds)
    first_bad: int | None = None  # works: the first failing budget
    max_bs: int | None = None  # workspace: the --cuda-graph-max-bs that avoids the failure
    buffers: list[str] = field(default_factory=list)  # the buffers to size
    where: list[str] = field(default_factory=list)  # where each is allocated
    budgets: list[int] = field(default_factory=list)  # the budgets the sentence names
    decide: str = ""  # inconclusive: what would decide it
    patch: str = ""  # fixed: the --confirm-patch that fixes it (kept applied)
    host: str = ""  # where a sentence names the host
    command: NextCommand | None = None
    # works: the comparison with eager had at most this many requests in flight, fewer than
    # the largest captured batch size (`captured_bs`): the larger graphs were not compared
    compared_requests: int | None = None
    captured_bs: int | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Advice | None:
        if not d:
            return None
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        d["kind"] = known(AdviceKind, d.get("kind"), "verdict.advice.kind")
        d["command"] = NextCommand.from_dict(d.get("command"))
        return cls(**d)


@dataclass
class Evidence:
    """One piece of evidence behind a verdict."""

    kind: EvidenceKind
    summary: str  # one line a reviewer reads
    cells: list[str] = field(default_factory=list)  # config keys of the cells it rests on
    details: EvidenceDetails = field(default_factory=lambda: EvidenceDetails())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Evidence:
        return cls(**{**d, "kind": known(EvidenceKind, d.get("kind"), "verdict.evidence.kind")})


@dataclass
class Verdict:
    """The diagnosis of one failure mode (a group of failing cells with one signature)."""

    kind: VerdictKind
    budgets: list[int]
    signature: str | None  # Signature.id of the group (None for ok/inconclusive without one)
    outcome: str  # the group's outcome (crash, garbage, ...)
    confidence: Confidence
    decided_by: str  # which evidence decided it (e.g. "oversize experiment")
    evidence: list[Evidence] = field(default_factory=list)
    next_step: str = ""
    buffer: dict[str, Any] | None = None  # {attr, file, line, expr, sizes...} when named
    host: str | None = None
    patch_confirmed: bool | None = None  # --confirm-patch: did the patch fix it
    would_decide: str = ""  # inconclusive / low confidence: the experiment that would decide
    next_command: str = ""  # the exact command to run next
    reason: VerdictReason = ""
    tested: bool = True  # False: the budgets were not restarted (assumed from neighbours)
    latent: bool = False  # found by the latent check: the cells pass, memcheck does not
    cheap_cells: list[str] = field(default_factory=list)  # its cells that ran cheap
    advice: Advice | None = None  # next_step and next_command as data (None: an old journal)
    inferred: bool = False  # latent, inferred from what the experiments proved (not measured)

    @property
    def label(self) -> str:
        """The kind as shown: `buffer_sizing (latent)` for a latent fault."""
        if self.latent:
            return f"{self.kind} (latent, inferred)" if self.inferred else f"{self.kind} (latent)"
        return self.kind

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["evidence"] = [e.to_dict() for e in self.evidence]
        d["label"] = self.label
        if not self.cheap_cells:
            del d["cheap_cells"]  # written only when some ran cheap (older readers: absent)
        if self.advice is None:
            del d["advice"]  # as journals without it were written
        if not self.inferred:
            del d["inferred"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        d["kind"] = known(VerdictKind, d.get("kind"), "verdict.kind")
        d["confidence"] = known(Confidence, d.get("confidence"), "verdict.confidence")
        d["reason"] = known(VerdictReason, d.get("reason", ""), "verdict.reason")
        d["evidence"] = [Evidence.from_dict(e) for e in d.get("evidence") or []]
        d["advice"] = Advice.from_dict(d.get("advice"))
        return cls(**d)
