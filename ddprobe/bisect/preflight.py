"""The plan's preflight: every budget, with graphs and eager, through the host's own SGLang
argument handling in one round trip, before the first restart (and for `--plan`).

Each cell still passes `server.preflight` again when it runs (from the cache: no second
round trip), so a cell whose effective config is not its label is refused there and becomes
`config_error` without a restart. This module only asks early and says what it found:

    pf = plan_preflight(r, host, budgets=(8, 16, 32), base=Config(budget=8))
    pf.lines()        # per budget: runs as planned / refused (why) / not checked (assumption)
    pf.effective[16]  # EffectiveConfig the server will run b16 with (graphs on)
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ddprobe.defaults import OVERSIZE_FACTOR
from ddprobe.effective import EffectiveConfig, describe
from ddprobe.errors import RefusedError
from ddprobe.inventory import Host
from ddprobe.remote import Remote, RemoteOptions
from ddprobe.results import Config
from ddprobe.server.caches import RunCaches
from ddprobe.server.launch import build_launch, check_launch, host_flags
from ddprobe.server.preflight import (
    PreflightResult,
    apply_result,
    not_applicable,
    run_preflight,
    static_rules,
)
from ddprobe.server.prepare import prepare_host
from ddprobe.server.registry import get_manager

if TYPE_CHECKING:
    from ddprobe.sources.argrules import ArgRules


@dataclass
class PlanPreflight:
    host: str
    ran: bool = False  # the host's SGLang answered for at least one config
    effective: dict[int, EffectiveConfig] = field(default_factory=dict)  # graphs on, by budget
    refused: dict[str, str] = field(default_factory=dict)  # config key -> why
    assumption: str = ""  # when it could not run: what is assumed instead
    version: str | None = None
    entry: str = ""
    results: dict[str, PreflightResult] = field(default_factory=dict)

    @property
    def all_refused(self) -> bool:
        return bool(self.results) and len(self.refused) == len(self.results)

    def lines(self) -> list[str]:
        if not self.ran and self.assumption:
            return [f"preflight ({self.host}): {self.assumption}"] + [
                f"  {k}: REFUSED: {v}" for k, v in self.refused.items()]
        what = ", ".join(w for w in (self.host, self.entry, self.version) if w)
        out = [f"preflight ({what}):"]
        for key, res in self.results.items():
            if key in self.refused:
                out.append(f"  {key}: REFUSED: {self.refused[key]}")
            elif res.status == "not_run":
                out.append(f"  {key}: not checked: {res.message}")
            else:
                out.append(f"  {key}: {describe(res.effective)}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "ran": self.ran, "assumption": self.assumption,
                "version": self.version, "entry": self.entry,
                "refused": dict(self.refused),
                "results": {k: v.to_dict() for k, v in self.results.items()}}


def plan_configs(budgets: Sequence[int], base: Config) -> list[Config]:
    """What a bisect over `budgets` may start: each budget with graphs on and eager."""
    out = []
    for b in budgets:
        out.append(replace(base, budget=b, graph=True))
        out.append(replace(base, budget=b, graph=False))
    return out


def plan_preflight(r: Remote, host: Host, *, budgets: Sequence[int], base: Config,
                   caches: RunCaches | None = None) -> PlanPreflight:
    caches = caches if caches is not None else RunCaches()
    prepare_host(r, host, caches=caches)
    flags, _why = host_flags(r, host, cache=caches.flags)
    mgr = get_manager(r, host)
    pf = PlanPreflight(host.name)
    launches = []
    for cfg in plan_configs(budgets, base):
        ln = build_launch(host, cfg, flags, template=mgr.template())
        try:
            ln = check_launch(ln, flags)
        except RefusedError as e:
            pf.refused[cfg.key] = str(e)
            pf.results[cfg.key] = PreflightResult("rejected", message=str(e))
            continue
        launches.append(ln)
    answers = run_preflight(r, host, launches)
    rules = None
    if launches and any(a.status == "not_run" for a in answers) and \
            not not_applicable(host, launches[0].argv):
        rules = static_rules(r, host)
    for ln, res in zip(launches, answers, strict=False):
        key = ln.config.key
        pf.results[key] = res
        pf.version = pf.version or res.version
        pf.entry = pf.entry or res.entry
        if res.status == "not_run":
            # named before the cell is judged: a cell the static reading refuses rests on
            # that reading too (its --json `assumption` was empty)
            pf.assumption = pf.assumption or _not_run_assumption(res.message, rules)
        try:
            checked = apply_result(host, ln, res, rules=rules)
        except RefusedError as e:
            pf.refused[key] = str(e).removeprefix("preflight: ")
            continue
        if res.status == "not_run":
            continue
        pf.ran = True
        if ln.config.graph and checked.effective is not None:
            pf.effective[ln.config.budget] = checked.effective
    return pf


def _not_run_assumption(message: str, rules: ArgRules | None) -> str:
    """What the plan rests on when the host's own argument handling did not run."""
    if rules is None:
        return message
    head = message.split("; assumption:")[0]
    found = [x.where for x in (rules.topk1, rules.steps_assert) if x is not None]
    return (f"{head}; the cells are judged by a static reading of the install's argument "
            f"rules ({', '.join(found) or 'no speculative rewrite found'}); assumption: "
            f"nothing else in its post-init changes these flags")


@dataclass
class HostPreview:
    """What `bisect --plan` found on one host without restarting anything."""

    host: str
    preflight: PlanPreflight | None = None
    suspects: list[dict[str, Any]] = field(default_factory=list)
    sizing: dict[str, Any] = field(default_factory=dict)  # max_bs, context_len the suspects used
    notes: list[str] = field(default_factory=list)
    error: str = ""

    def lines(self) -> list[str]:
        if self.error:
            return [f"{self.host}: not reachable for the preflight: {self.error}"]
        out = list(self.preflight.lines()) if self.preflight else []
        where = ", ".join(f"{k} {v}" for k, v in self.sizing.items() if v is not None)
        if self.suspects:
            out.append(f"grep-buffers suspects ({self.host}{', ' + where if where else ''}):")
            for s in self.suspects:
                short = [z for z in s.get("sizes") or [] if z.get("short_by")]
                tail = (f", short at b{short[0]['budget']} by {short[0]['short_by']:,} bytes"
                        if short else "")
                out.append(f"  {s['attr']} ({s['file']}:{s.get('line') or '?'}), tier "
                           f"{s['tier']}{tail}")
        else:
            out.append(f"grep-buffers ({self.host}): no captured buffer to suspect")
        out += [f"  note: {n}" for n in self.notes]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "error": self.error, "sizing": self.sizing,
                "preflight": self.preflight.to_dict() if self.preflight else None,
                "suspects": self.suspects, "notes": self.notes}


def preview(hosts: Sequence[Host], *, opts: RemoteOptions, budgets: Sequence[int], base: Config,
            backend: str | None, context_len: int | None, factor: int = OVERSIZE_FACTOR,
            caches: RunCaches | None = None, compare: bool = True) -> list[HostPreview]:
    """`bisect --plan`'s look at each host: the preflight and the static suspects (seconds;
    no lock, no restart, nothing written except the testbed's idempotent install), and how a
    divergence's wrong side would be decided there (`compare`: the comparison is on)."""
    from ddprobe.bisect.agreement import AgreementOptions, which_side_line
    from ddprobe.bisect.session import host_static_evidence
    from ddprobe.errors import DdprobeError, RemoteError
    from ddprobe.remote import connect
    from ddprobe.server.launch import host_flags
    from ddprobe.sources.determinism import NONE
    caches = caches if caches is not None else RunCaches()
    out = []
    for h in hosts:
        hp = HostPreview(h.name)
        try:
            with connect(h, opts) as r:
                pf = plan_preflight(r, h, budgets=budgets, base=base, caches=caches)
                hp.preflight = pf
                effs = list(pf.effective.values())

                def same(name: str, effs: list[Any] = effs) -> Any:
                    vals = {getattr(e, name) for e in effs} - {None}
                    return vals.pop() if len(vals) == 1 else None

                max_bs = base.max_bs or same("max_captured_bs") or h.server.max_bs
                ctx = context_len or same("context_length")
                hp.sizing = {"max_bs": max_bs, "context_len": ctx}
                if ctx is None:
                    hp.notes.append("no context length (the server's config does not say; "
                                    "give --context-len): buffers sized by it are not "
                                    "evaluated")
                st = host_static_evidence(r, h, budgets=budgets, max_bs=max_bs,
                                          backend=backend, factor=factor, context_len=ctx,
                                          topk=same("topk") or h.server.topk,
                                          num_steps=same("num_steps") or h.server.steps,
                                          effective_backend=same("attention_backend"))
                hp.suspects = [s.to_dict() for s in st.suspects]
                hp.notes += list(st.notes)
                if compare:
                    flags, _ = host_flags(r, h, cache=caches.flags)
                    det = flags.deterministic if flags is not None else NONE
                    hp.notes.append("graph vs eager, which side of a divergence is wrong: " +
                                    which_side_line(AgreementOptions(
                                        deterministic=det,
                                        backend=backend or same("attention_backend"))))
        except RemoteError as e:
            hp.error = str(e)
        except DdprobeError as e:
            hp.error = str(e)
        out.append(hp)
    return out
