"""The preflight: every planned launch parsed by the host's own SGLang before any restart.

SGLang rewrites and checks flags after parsing (`ServerArgs.__post_init__`, 0.5.2x
`resolve_once` + `arg_groups/*_hook.py`). A launch check against the flag names alone says
"accepted" where the server then runs another config (`--speculative-eagle-topk 1`: draft
tokens = steps + 1, so every budget runs the same chain) or dies on an assertion
(`--speculative-num-steps` unset with draft tokens given). The preflight runs the host
program `hostside/preflight.py` (its docstring is the interface) with the interpreter the server
runs with, on the launch flags, and compares what comes back with what the cell's label says:

    results = run_preflight(r, host, [launch, ...])    # one round trip, seconds; cached
    launch = preflight_launch(r, host, launch)         # RefusedError, or the launch with
                                                       # .effective and notes

A cell is refused (never run under a wrong label) when the server would run another budget,
graph mode, max bs or backend than the label says, or when SGLang rejects the argv. An
install that cannot be imported is refused too (the server would fail the same way). When
the preflight cannot run (the host's interpreter lacks torch, which every release's
server_args imports; the server runs in a container; post-init needs a GPU it cannot see),
the cell goes ahead and the note names the assumption: the server applies the flags as given.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ddprobe.effective import EffectiveConfig, capped_by_request_pool, from_server_args
from ddprobe.errors import RefusedError, RemoteTimeout
from ddprobe.hostside.client import call
from ddprobe.hostside.errors import NoAnswerError
from ddprobe.inventory import Host
from ddprobe.remote import Remote
from ddprobe.results import Config
from ddprobe.server.launch import FLAG_FIELDS, Launch, budget_fields
from ddprobe.untrusted import first_chars

if TYPE_CHECKING:  # read lazily: the sources are read only where the preflight cannot run
    from ddprobe.sources.argrules import ArgRules

NO_ANSWER_CAP = 300  # characters of the last output lines of a program that gave no answer

# modules a GPU host has and a CPU-only checkout may not: without them the preflight cannot
# run, which is not a fault of the install
GPU_ONLY_MODULES = ("torch", "triton", "sgl_kernel", "flashinfer", "cuda", "pynvml")
_NUMERIC = {"draft_tokens", "num_steps", "topk", "tree_budget", "cuda_graph_max_bs",
            "max_running_requests", "context_length"}


@dataclass(frozen=True)
class PreflightResult:
    """The preflight's answer for one launch."""

    status: str  # ok | rejected (SGLang refuses the argv, or the install) | not_run
    effective: EffectiveConfig | None = None
    message: str = ""  # rejected: why; not_run: why, with the assumption made
    warnings: tuple[str, ...] = ()  # what SGLang logged while parsing (its rewrites)
    where: str = ""  # file:line of the check that refused it
    entry: str = ""  # e.g. sglang.srt.server_args:prepare_server_args
    version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "warnings": list(self.warnings),
                "where": self.where, "entry": self.entry, "version": self.version,
                "effective": self.effective.to_dict() if self.effective else None}


_CACHE: dict[tuple[Any, ...], PreflightResult] = {}
_LOCK = threading.Lock()


def clear_cache() -> None:
    with _LOCK:
        _CACHE.clear()
        _RULES.clear()


def _key(host: Host, argv: Sequence[str], env: Sequence[tuple[str, str]]) -> tuple[Any, ...]:
    return (host.name, host.host, host.python, host.package, host.env, tuple(argv), tuple(env))


def not_applicable(host: Host, argv: Sequence[str]) -> str:
    """Why the preflight cannot speak for this launch ("" when it can)."""
    if not argv:
        return "no launch command"
    if argv[0] != host.python:
        return (f"the server is started by {argv[0]!r}, not by the host's interpreter "
                f"{host.python!r} (key 'python'), so its SGLang cannot be asked")
    return ""


def run_preflight(r: Remote, host: Host, launches: Sequence[Any], *,
                  timeout: float = 300.0) -> list[PreflightResult]:
    """The preflight of each launch (`server.launch.Launch`), in order; one round trip for
    those not cached. Never raises for what the host answers; RemoteError on a lost host."""
    out: list[PreflightResult | None] = []
    todo: list[tuple[int, Any]] = []
    for i, ln in enumerate(launches):
        why = not_applicable(host, ln.argv)
        if why:
            out.append(_not_run(f"preflight not run: {why}"))
            continue
        with _LOCK:
            hit = _CACHE.get(_key(host, ln.server_args, ln.env))
        out.append(hit)
        if hit is None:
            todo.append((i, ln))
    if todo:
        answers = _ask(r, host, [ln for _, ln in todo], timeout)
        for (i, ln), res in zip(todo, answers, strict=False):
            out[i] = res
            with _LOCK:
                _CACHE[_key(host, ln.server_args, ln.env)] = res
    return [o for o in out if o is not None]


def _ask(r: Remote, host: Host, launches: Sequence[Any], timeout: float) -> list[PreflightResult]:
    req = {"package": host.package,
           "configs": [{"key": ln.config.key, "argv": list(ln.server_args),
                        "env": dict(ln.env)} for ln in launches]}
    n = len(launches)
    try:
        doc = call(r, "parse", req, program="preflight", timeout=timeout)
    except RemoteTimeout:
        # the host is there (the command ran); its argument handling hangs (e.g. fetching a
        # model config without network): no answer, not an infrastructure failure
        return [_not_run(f"preflight not run: {host.package}'s argument handling did not "
                         f"answer within {timeout:.0f} s")] * n
    except NoAnswerError as e:
        return [_not_run(f"preflight not run: {_no_answer(host, e)}")] * n
    version = _s(doc.get("version"))
    if not doc.get("ok"):
        return [_install_failure(host, doc, version)] * n
    entry = _s(doc.get("entry")) or ""
    results = doc.get("results")
    if not isinstance(results, list):
        results = []
    out = []
    for i in range(n):
        item = results[i] if i < len(results) and isinstance(results[i], dict) else {}
        out.append(_one(host, item, entry, version))
    return out


def _no_answer(host: Host, e: NoAnswerError) -> str:
    if e.kind == "no-python" or e.code == 127:
        return f"the interpreter {host.python!r} was not found (key 'python')"
    if e.kind != "no-answer":
        return f"the preflight program's answer was unusable ({_s(e.reason, 300)})"
    tail = first_chars(" | ".join((e.stderr.strip() or e.stdout.strip()).splitlines()[-2:]),
                       NO_ANSWER_CAP)
    return f"the preflight program gave no answer (exit {e.code}: {tail})"


def _as_dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _one(host: Host, item: dict[str, Any], entry: str, version: str | None) -> PreflightResult:
    """One launch's answer: parsed (its effective config), rejected by SGLang, or incomplete."""
    raw_warnings = item.get("warnings")
    warnings = tuple(_s(w) or "" for w in (raw_warnings if isinstance(raw_warnings, list)
                                           else [])[:50] if isinstance(w, str))
    status = item.get("status")
    err = _as_dict(item.get("error"))
    if status == "ok" and isinstance(item.get("values"), dict):
        values = dict(item["values"])
        values.setdefault("version", version)
        eff = capped_by_request_pool(from_server_args(values, source="preflight"))
        return PreflightResult("ok", eff, "", warnings, "", entry, version)
    what = f"{host.package} {version or '?'}"
    if status == "rejected":
        return _rejected(what, err, warnings, entry, version)
    msg = f"{_s(err.get('type')) or 'error'}: {_s(err.get('message'), 300) or '?'}"
    where = _s(err.get("where"), 300) or ""
    return _not_run(f"preflight incomplete: {what}'s argument handling raised {msg}"
                    f"{' at ' + where if where else ''} (not a verdict on the flags)",
                    entry=entry, version=version)


def _rejected(what: str, err: dict[str, Any], warnings: tuple[str, ...], entry: str,
              version: str | None) -> PreflightResult:
    """SGLang refused the argv: argparse (unknown or bad flags) or its own argument checks."""
    msg = _s(err.get("message"), 400) or "rejected"
    line = _s(err.get("line"), 200)
    if err.get("kind") == "argparse":
        text = f"{what} refuses these flags ({entry}): {msg}"
    else:
        text = (f"{what} rejects this config in its argument checks: "
                f"{_s(err.get('type')) or 'error'}: {msg}" +
                (f" (`{line}`)" if line and line not in msg else ""))
    return PreflightResult("rejected", None, text + _hint(msg + " " + (line or "")),
                           warnings, _s(err.get("where"), 300) or "", entry, version)


def _install_failure(host: Host, doc: dict[str, Any], version: str | None) -> PreflightResult:
    err = _as_dict(doc.get("error"))
    missing = _s(err.get("missing")) or ""
    msg = f"{_s(err.get('type')) or 'error'}: {_s(err.get('message'), 300) or '?'}"
    where = _s(err.get("where"), 300) or ""
    module = _s(doc.get("module")) or f"{host.package}.srt.server_args"
    if missing.split(".")[0] == host.package:
        return _not_run(f"preflight not run: {host.python} on {host.name} cannot import "
                        f"{host.package} at all (keys 'python', 'package', env PYTHONPATH)",
                        version=version)
    if doc.get("stage") == "import" and err.get("kind") == "import" and \
            missing.split(".")[0] not in GPU_ONLY_MODULES:
        return PreflightResult(
            "rejected", None,
            f"{host.package} {version or '?'} cannot be imported on {host.name} with "
            f"{host.python}: {msg}{' (' + where + ')' if where else ''}; a server started "
            f"with this interpreter fails the same way: fix the install (e.g. `pip install "
            f"{missing or '...'}`) before bisecting", (), where, "", version)
    if missing:
        why = (f"importing {module} needs {missing}, which {host.python} on {host.name} "
               f"lacks (a GPU host has it)")
    else:
        why = f"importing {module} failed: {msg}"
    return _not_run(f"preflight not run: {why}", version=version)


def _not_run(why: str, *, entry: str = "", version: str | None = None) -> PreflightResult:
    return PreflightResult("not_run", None,
                           f"{why}; assumption: the server applies the launch flags as given "
                           f"(SGLang's post-init rewrites, e.g. topk 1 -> draft tokens = steps "
                           f"+ 1, are not checked)", (), "", entry, version)


def _hint(text: str) -> str:
    if "speculative_eagle_topk is None" in text or "speculative_num_steps is unset" in text:
        return ("; SGLang asserts that steps, topk and draft tokens are all set or all unset:"
                " set server.steps (--speculative-num-steps) and server.topk in the inventory")
    return ""


def _s(v: Any, limit: int = 200) -> str | None:
    if not isinstance(v, str) or not v:
        return None
    shown = "".join(ch if ch.isprintable() else " " for ch in v)
    return shown[:limit]


# ----- the plan against the answer -----------------------------------------------------------

def asked(server_args: Sequence[str]) -> dict[str, Any]:
    """{EffectiveConfig field: value} the launch flags ask for (the last occurrence wins)."""
    out: dict[str, Any] = {}
    i = 0
    args = list(server_args)
    while i < len(args):
        name, eq, inline = args[i].partition("=")
        field = FLAG_FIELDS.get(name)
        if field is not None:
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else None)
            if value is not None:
                if field in _NUMERIC:
                    try:
                        out[field] = int(value)
                    except ValueError:
                        pass
                else:
                    out[field] = value
        if name in ("--disable-cuda-graph", "--disable-decode-cuda-graph"):
            out["cuda_graph"] = False
        i += 1
    out.setdefault("cuda_graph", True)
    return out


def label_fields(host: Host, config: Config) -> tuple[str, ...]:
    """The effective fields a cell's label depends on (its budget flags, graph, max bs,
    backend): a difference in one of them means the cell would run under a wrong label."""
    out = list(budget_fields(host)) + ["cuda_graph"]
    if config.max_bs is not None:
        out.append("cuda_graph_max_bs")
    if config.backend:
        out.append("attention_backend")
    return tuple(out)


def mismatches(host: Host, launch: Launch, eff: EffectiveConfig) -> tuple[list[str], list[str]]:
    """(differences that change the cell's label, other differences) as readable lines."""
    want = asked(launch.server_args)
    critical = set(label_fields(host, launch.config))
    bad: list[str] = []
    other: list[str] = []
    for field, (w, got) in eff.differs(**want).items():
        line = (f"CUDA graphs {'on' if got else 'off'} (asked {'on' if w else 'off'})"
                if field == "cuda_graph" else f"{field.replace('_', ' ')} {got} (asked {w})")
        (bad if field in critical else other).append(line)
    return bad, other


def preflight_launch(r: Remote, host: Host, launch: Launch) -> Launch:
    """The launch with its preflight answer (`.effective`, notes), or RefusedError."""
    res = run_preflight(r, host, [launch])[0]
    rules = static_rules(r, host) if res.status == "not_run" and \
        not not_applicable(host, launch.argv) else None
    return apply_result(host, launch, res, rules=rules)


_RULES: dict[tuple[Any, ...], ArgRules | None] = {}


def static_rules(r: Remote, host: Host) -> ArgRules | None:
    """The install's post-parse rules read from its source (`sources.argrules`), or None
    when its sources cannot be read; remembered per host entry."""
    from ddprobe.errors import DdprobeError, RemoteError
    from ddprobe.sources.fetch import read_arg_rules
    key = (host.name, host.host, host.python, host.package, host.env)
    with _LOCK:
        if key in _RULES:
            return _RULES[key]
    try:
        rules = read_arg_rules(r, host)
    except RemoteError:
        raise
    except DdprobeError:
        rules = None
    with _LOCK:
        _RULES[key] = rules
    return rules


def apply_result(host: Host, launch: Launch, res: PreflightResult, *,
                 rules: ArgRules | None = None) -> Launch:
    if res.status == "not_run":
        if rules is not None:
            want = asked(launch.server_args)
            verdict, why = rules.predict(want, want.get("algorithm"))
            head = res.message.split("; assumption:")[0]
            if verdict == "rejected":
                raise RefusedError(f"preflight (static: {head}): {host.package} would die at "
                                   f"start-up: {why}" + _hint(why))
            if verdict == "rewritten":
                raise RefusedError(f"preflight (static: {head}): {launch.config.key} would "
                                   f"run under a wrong label: {why}" +
                                   _remedy(host, ["draft tokens"]))
            found = [x.where for x in (rules.topk1, rules.steps_assert) if x is not None]
            note = (f"{head}; static reading of the install's argument rules "
                    f"({', '.join(found) or 'no speculative rewrite found'}) predicts no "
                    f"rewrite of these flags; assumption: nothing else in its post-init "
                    f"changes them")
            return replace(launch, notes=(*launch.notes, note), preflight=res)
        return replace(launch, notes=(*launch.notes, res.message), preflight=res)
    if res.status == "rejected":
        raise RefusedError(f"preflight: {res.message}"
                           + (f" [{res.where}]" if res.where else ""))
    assert res.effective is not None
    bad, other = mismatches(host, launch, res.effective)
    what = f"{host.package} {res.version or '?'}"
    if bad:
        because = "; ".join(res.warnings[:3])
        raise RefusedError(
            f"preflight: {launch.config.key} would run under a wrong label: {what} runs "
            f"{', '.join(bad)}" + (f" (it says: {because})" if because else "") +
            _remedy(host, bad))
    notes = list(launch.notes)
    if other:
        notes.append(f"preflight: {what} adjusts {', '.join(other)}")
    return replace(launch, notes=tuple(notes), effective=res.effective, preflight=res)


def _remedy(host: Host, bad: Sequence[str]) -> str:
    text = " ".join(bad)
    if "draft tokens" in text and host.server.topk == 1:
        return ("; with --speculative-eagle-topk 1 SGLang sets draft tokens = steps + 1, so "
                "the budget is the chain length: set `server.budget_flag: steps` (or "
                "server.budget_args) in the inventory, or a topk above 1")
    if "CUDA graphs" in text:
        return "; the server turns CUDA graphs off for this config (see its warnings)"
    return "; see README 'What a budget means' for the per-algorithm mapping"
