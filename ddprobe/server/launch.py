"""Launch flags: a Config + the host's ServerSettings -> the server's argv, checked before use.

How a budget maps to flags is per host (`server.budget_flag`, README "What a budget means"):
  draft_tokens -> --speculative-num-draft-tokens N+1 (EAGLE-style trees, with steps/topk)
  ddtree       -> --speculative-ddtree-budget N      (SGLang PR #29907)
  steps        -> --speculative-num-steps N --speculative-num-draft-tokens N+1 (chains, topk 1)
or a host's own template (`server.budget_args`, words with {budget} and {draft_tokens}).
Spelling drift (`--cuda-graph-max-bs` became `--cuda-graph-max-bs-decode`) is resolved against
the flags the host's installed version defines, read from its `srt/server_args.py`.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ddprobe.effective import EffectiveConfig
from ddprobe.errors import ConfigError, DdprobeError, RemoteError
from ddprobe.inventory import Host
from ddprobe.remote import Remote
from ddprobe.results import Config
from ddprobe.sources.determinism import NONE as NO_DETERMINISM
from ddprobe.sources.determinism import Determinism
from ddprobe.sources.flags import FlagSet

if TYPE_CHECKING:
    from ddprobe.sources.fetch import FlagsCache

MAX_BS_SPELLINGS = ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode")
DEFAULT_TEMPLATE = ("{python}", "-m", "{package}.launch_server", "{args}")
DOCKER_TEMPLATE = ("python3", "-m", "{package}.launch_server", "{args}")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_WILDCARD = ("", "0.0.0.0", "::", "[::]")


@dataclass(frozen=True)
class Launch:
    """What a manager starts: the full command, the launch flags and the extra environment."""

    argv: tuple[str, ...]  # the whole command (template expanded)
    server_args: tuple[str, ...]  # the launch flags alone (what the flag check saw)
    env: tuple[tuple[str, str], ...]  # server.env + config.env (host.env comes with the Remote)
    config: Config
    checked: bool = False  # the flags were checked against the installed version
    notes: tuple[str, ...] = ()
    effective: EffectiveConfig | None = None  # the preflight's answer (what will run)
    preflight: Any = None  # server.preflight.PreflightResult, when one was asked

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


def server_args(host: Host, config: Config, flags: FlagSet | None = None) -> list[str]:
    """The launch flags for one config on one host (no interpreter, no template)."""
    s = host.server
    if not s.model_path:
        raise ConfigError(f"host '{host.name}' has no server.model_path: ddprobe cannot build "
                          f"the launch command", key="server.model_path", **where(host))
    if config.budget < 1:
        raise ConfigError(f"budget must be >= 1, got {config.budget}", key="budget")
    out = ["--model-path", s.model_path, "--host", s.bind, "--port", str(s.port)]
    if s.algorithm:
        out += ["--speculative-algorithm", s.algorithm]
    if s.draft_model_path:
        out += ["--speculative-draft-model-path", s.draft_model_path]
    if s.steps is not None and "--speculative-num-steps" not in _budget_words(host, config):
        out += ["--speculative-num-steps", str(s.steps)]
    if s.topk is not None:
        out += ["--speculative-eagle-topk", str(s.topk)]
    out += _budget_words(host, config)
    if not config.graph:
        out += graph_off_flags(flags)
    # unset in the cell: the host's production value (server.max_bs / server.backend), as
    # `ddprobe run` does; a bisect or sweep cell otherwise ran the release's default max bs
    # (256 on SGLang 0.5.11) and attention backend instead of the production ones
    max_bs = config.max_bs if config.max_bs is not None else s.max_bs
    if max_bs is not None:
        out += [max_bs_flag(flags), str(max_bs)]
    backend = config.backend or s.backend
    if backend:
        out += ["--attention-backend", backend]
    out += list(s.args) + list(config.extra_args)
    return out


def _budget_words(host: Host, config: Config) -> list[str]:
    s = host.server
    if s.budget_args:
        return [w.replace("{budget}", str(config.budget))
                .replace("{draft_tokens}", str(config.budget + 1)) for w in s.budget_args]
    if s.budget_flag == "ddtree":
        return ["--speculative-ddtree-budget", str(config.budget)]
    if s.budget_flag == "steps":
        return ["--speculative-num-steps", str(config.budget),
                "--speculative-num-draft-tokens", str(config.budget + 1)]
    return ["--speculative-num-draft-tokens", str(config.budget + 1)]


# launch flag -> EffectiveConfig field it sets
FLAG_FIELDS = {
    "--speculative-algorithm": "algorithm",
    "--speculative-num-draft-tokens": "draft_tokens",
    "--speculative-num-steps": "num_steps",
    "--speculative-eagle-topk": "topk",
    "--speculative-ddtree-budget": "tree_budget",
    "--cuda-graph-max-bs": "cuda_graph_max_bs",
    "--cuda-graph-max-bs-decode": "cuda_graph_max_bs",
    "--attention-backend": "attention_backend",
    "--max-running-requests": "max_running_requests",
    "--context-length": "context_length",
}


def budget_fields(host: Host) -> tuple[str, ...]:
    """The effective-config fields that carry the budget on this host (what the preflight
    compares): the fields of the flags the budget mapping fills in."""
    words = _budget_words(host, Config(budget=7))
    return tuple(dict.fromkeys(FLAG_FIELDS[w] for i, w in enumerate(words[:-1])
                               if w in FLAG_FIELDS and words[i + 1] in ("7", "8")))


def graph_off_flags(flags: FlagSet | None) -> list[str]:
    if flags is None or flags.has("--disable-cuda-graph"):
        return ["--disable-cuda-graph"]  # deprecated on 0.5.2x but still accepted
    split = [f for f in ("--disable-decode-cuda-graph", "--disable-prefill-cuda-graph")
             if flags.has(f)]
    return split or ["--disable-cuda-graph"]


def max_bs_flag(flags: FlagSet | None) -> str:
    if flags is None:
        return MAX_BS_SPELLINGS[0]
    return flags.pick(*MAX_BS_SPELLINGS) or MAX_BS_SPELLINGS[0]


def expand_template(template: Sequence[str], values: Mapping[str, str], args: Sequence[str],
                    *, host: Host | None = None) -> list[str]:
    """Expand `{python}`, `{package}`, `{port}`, ... inside words; `{args}` as a whole word is
    replaced by the launch flags (appended at the end when the template lacks it)."""
    out: list[str] = []
    spliced = False
    for word in template:
        if word == "{args}":
            out.extend(args)
            spliced = True
            continue

        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in values:
                known = ", ".join("{" + k + "}" for k in sorted([*values, "args"]))
                raise ConfigError(f"unknown placeholder {{{name}}} in server.launch (known: "
                                  f"{known})", key="server.launch", **where(host))
            return values[name]

        out.append(_PLACEHOLDER.sub(sub, word))
    if not spliced:
        out.extend(args)
    return out


def build_launch(host: Host, config: Config, flags: FlagSet | None = None, *,
                 template: Sequence[str] | None = None, notes: Sequence[str] = ()) -> Launch:
    """The full launch for one config (not checked; see `check_launch`)."""
    args = server_args(host, config, flags)
    s = host.server
    values = {"python": host.python, "package": host.package, "port": str(s.port),
              "bind": s.bind, "model_path": s.model_path}
    tpl = s.launch or template or DEFAULT_TEMPLATE
    argv = expand_template(tpl, values, args, host=host)
    env = tuple(s.env) + tuple(config.env)
    return Launch(tuple(argv), tuple(args), env, config, False, tuple(notes))


def check_launch(launch: Launch, flags: FlagSet | None) -> Launch:
    """Raise RefusedError when the installed version would refuse a flag; else the launch,
    marked checked (or with a note saying why it could not be checked)."""
    if flags is None:
        return launch
    flags.check(list(launch.server_args))
    return replace(launch, checked=True)


# ----- the host's flags ---------------------------------------------------------------------------

def host_flags(r: Remote, host: Host, *, refresh: bool = False,
               cache: FlagsCache | None = None) -> tuple[FlagSet | None, str]:
    """(the flags the host's install defines, "") or (None, why they could not be read).

    Read once per run and host entry (`ddprobe.sources.flags_for`, remembered in `cache`, the
    run's `RunCaches.flags`; a fresh one when none is passed): a bisect restarts many times
    against one install. An unreachable host raises (an
    infrastructure error); an install whose sources cannot be read (e.g. the server runs in a
    container) only loses the check.
    """
    from ddprobe.sources.fetch import flags_for
    try:
        return flags_for(r, host, refresh=refresh, cache=cache), ""
    except RemoteError:
        raise
    except DdprobeError as e:
        return None, (f"launch flags not checked (cannot read {host.package}'s server_args.py "
                      f"on the host: {e})")


def deterministic_mode(r: Remote, host: Host, *, cache: FlagsCache | None = None
                       ) -> Determinism:
    """The host's --enable-deterministic-inference (flag and backends), from its source
    (`ddprobe.sources.determinism.NONE`, claiming neither way, when the flags cannot be read)."""
    flags, _ = host_flags(r, host, cache=cache)
    return flags.deterministic if flags is not None else NO_DETERMINISM


def deterministic_backends(r: Remote, host: Host, *, cache: FlagsCache | None = None
                           ) -> tuple[str, ...] | None:
    """The attention backends the host's SGLang supports --enable-deterministic-inference on,
    from its source (None: the flags could not be read, or the list was not found)."""
    flags, _ = host_flags(r, host, cache=cache)
    return flags.deterministic.backends if flags is not None and flags.deterministic.flag \
        else (() if flags is not None else None)


def where(host: Host | None) -> dict[str, Any]:
    """path= and line= for a ConfigError about a host (from its inventory `source`)."""
    if host is None or ":" not in host.source:
        return {}
    path, _, line = host.source.rpartition(":")
    return {"path": path, "line": int(line) if line.isdigit() else None}


def server_target(host: Host) -> str:
    """The address the server's port is reached at, as seen from the host."""
    b = host.server.bind
    return "127.0.0.1" if b in _WILDCARD else b.strip("[]")
