"""The effective configuration: what the server really runs, not what the inventory asked for.

SGLang rewrites launch flags after parsing (`ServerArgs.__post_init__`; 0.5.2x:
`arg_groups/*_hook.py`): `--speculative-eagle-topk 1` sets draft tokens to steps + 1, an unset
`--cuda-graph-max-bs` is chosen from the GPU's memory, NEXTN becomes EAGLE, a backend can turn
CUDA graphs off. Every experiment that varies one of these values must start from the value
the server reported, so each is read from one of three sources (`EffectiveConfig.source`):

  preflight    the host's own SGLang argument handling run on the planned argv, no server
               started (`ddprobe.preflight`)
  server_info  `/server_info` (0.5.10+) or `/get_server_info` (0.4.x .. 0.5.x), read after
               the server became healthy: `dataclasses.asdict(server_args)` + scheduler info
  log          the server log alone (`Capture cuda graph bs [1, 2, 4, ...]`), when it died
               before answering

The capture line refines any source: it is the list the graph runner really captured
(`fields_from_log` names the fields it set). Everything read here came from a host and is
untrusted: only ints, bools and short strings of the expected shape are kept.

    eff = from_server_args(info, source="server_info").with_log(log_text)
    eff.cuda_graph_max_bs, eff.cuda_graph_bs, eff.to_dict(), EffectiveConfig.from_dict(d)
"""
from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

SOURCES = ("preflight", "server_info", "log")
_MAX_LIST = 512  # a captured-bs list longer than this is not believed
_MAX_STR = 120

# field -> the ServerArgs keys that carry it, first non-None wins (newest spelling first)
_KEYS: dict[str, tuple[str, ...]] = {
    "algorithm": ("speculative_algorithm",),
    "draft_tokens": ("speculative_num_draft_tokens",),
    "num_steps": ("speculative_num_steps",),
    "topk": ("speculative_eagle_topk",),
    "tree_budget": ("speculative_ddtree_budget", "speculative_tree_budget"),
    "cuda_graph_max_bs": ("cuda_graph_max_bs_decode", "cuda_graph_max_bs"),
    "cuda_graph_bs": ("cuda_graph_bs_decode", "cuda_graph_bs"),
    "attention_backend": ("decode_attention_backend", "attention_backend"),
    "max_running_requests": ("max_running_requests",),
    "context_length": ("context_length", "_model_context_len"),
    "version": ("version",),
}
# any of these true (or the decode graph backend "disabled") means no decode CUDA graphs
_GRAPH_OFF = ("disable_cuda_graph", "disable_decode_cuda_graph")
_CAPTURE = re.compile(r"Capture cuda graph bs \[([0-9,\s]{0,4096})\]")


@dataclass(frozen=True)
class EffectiveConfig:
    """The values a server runs with (None: the source did not say)."""

    algorithm: str | None = None
    draft_tokens: int | None = None  # --speculative-num-draft-tokens after post-init
    num_steps: int | None = None
    topk: int | None = None
    tree_budget: int | None = None  # DDTree builds: --speculative-ddtree-budget
    cuda_graph: bool | None = None  # decode CUDA graphs on
    cuda_graph_max_bs: int | None = None
    cuda_graph_bs: tuple[int, ...] | None = None  # the batch sizes captured (or to capture)
    attention_backend: str | None = None
    max_running_requests: int | None = None
    context_length: int | None = None
    version: str | None = None
    source: str = "server_info"  # one of SOURCES
    fields_from_log: tuple[str, ...] = ()  # fields the capture log line set or corrected

    @property
    def max_captured_bs(self) -> int | None:
        """The largest batch size that really runs in a graph (list first, then the max)."""
        if self.cuda_graph is False:
            return None
        if self.cuda_graph_bs:
            return max(self.cuda_graph_bs)
        return self.cuda_graph_max_bs

    def with_log(self, log: str) -> EffectiveConfig:
        """This record refined by the server log's `Capture cuda graph bs [...]` line."""
        captured = captured_bs(log)
        if captured is None:
            return self
        changed = ["cuda_graph_bs"] if captured != self.cuda_graph_bs else []
        eff = replace(self, cuda_graph_bs=captured, cuda_graph=True)
        if self.cuda_graph is not True:
            changed.append("cuda_graph")
        if self.cuda_graph_max_bs != max(captured):
            eff = replace(eff, cuda_graph_max_bs=max(captured))
            changed.append("cuda_graph_max_bs")
        return replace(eff, fields_from_log=tuple(dict.fromkeys(
            (*self.fields_from_log, *changed))))

    def differs(self, **want: Any) -> dict[str, tuple[Any, Any]]:
        """{field: (wanted, effective)} for each wanted value the server does not run."""
        out: dict[str, tuple[Any, Any]] = {}
        for k, v in want.items():
            got = getattr(self, k)
            if v is not None and got is not None and got != v:
                out[k] = (v, got)
        return out

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["cuda_graph_bs"] = list(self.cuda_graph_bs) if self.cuda_graph_bs is not None else None
        d["fields_from_log"] = list(self.fields_from_log)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> EffectiveConfig | None:
        if not d:
            return None
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if kw.get("cuda_graph_bs") is not None:
            kw["cuda_graph_bs"] = tuple(int(x) for x in kw["cuda_graph_bs"])
        kw["fields_from_log"] = tuple(kw.get("fields_from_log") or ())
        return cls(**kw)


def from_server_args(info: Mapping[str, Any], *, source: str = "server_info") -> EffectiveConfig:
    """The effective config from a ServerArgs dict (`/server_info`, the preflight's answer)."""
    if source not in SOURCES:
        raise ValueError(f"unknown source {source!r} (one of {', '.join(SOURCES)})")
    kw: dict[str, Any] = {"source": source}
    for name, keys in _KEYS.items():
        value = _first(info, keys)
        if name in ("algorithm", "attention_backend", "version"):
            kw[name] = _str(value)
        elif name == "cuda_graph_bs":
            kw[name] = _int_list(value)
        else:
            kw[name] = _int(value)
    off = any(info.get(k) is True for k in _GRAPH_OFF) or \
        _str(info.get("cuda_graph_backend_decode")) == "disabled"
    known = any(k in info for k in (*_GRAPH_OFF, "cuda_graph_backend_decode"))
    kw["cuda_graph"] = (not off) if known else None
    if kw["cuda_graph"] is False:
        kw["cuda_graph_bs"] = None
    return EffectiveConfig(**kw)


def capped_by_request_pool(eff: EffectiveConfig) -> EffectiveConfig:
    """The batch sizes the graph runner really captures, from what ServerArgs plans.

    SGLang's `get_batch_sizes_to_capture` (0.5.x) drops every planned bs above the request
    pool, whose size is --max-running-requests when it is given (divided by the dp size, which
    is taken as 1 here: with dp > 1 the pool is smaller still), and adds the pool size when the
    plan ran past it. On the H200 (docs/gpu-results.md, 2026-12-02) ServerArgs planned 1..256
    (51 sizes) and the server captured 1..8 with --max-running-requests 8. Without a max
    running requests the pool is sized at load time: the list is left as planned.
    """
    bs, pool = eff.cuda_graph_bs, eff.max_running_requests
    if not bs or not pool or pool < 1 or max(bs) <= pool:
        return eff
    return replace(eff, cuda_graph_bs=tuple(sorted({b for b in bs if b <= pool} | {pool})))


def from_log(log: str) -> EffectiveConfig | None:
    """What the log alone says (the server died before /server_info answered), or None."""
    base = EffectiveConfig(source="log")
    eff = base.with_log(log)
    return None if eff is base else eff


def captured_bs(log: str) -> tuple[int, ...] | None:
    """The batch sizes of the first `Capture cuda graph bs [...]` line (the target model's)."""
    m = _CAPTURE.search(log or "")
    if m is None:
        return None
    words = [w.strip() for w in m.group(1).split(",") if w.strip()]
    if not words or len(words) > _MAX_LIST:
        return None
    with contextlib.suppress(ValueError):
        out = tuple(int(w) for w in words)
        if all(0 < x < 1 << 20 for x in out):
            return out
    return None


def fetch_server_info(url: str, *, timeout: float = 10.0) -> tuple[dict[str, Any], str]:
    """(`/server_info` or `/get_server_info` as a dict, the path that answered) or ({}, "")."""
    import httpx

    from ddprobe import httpclients
    with httpclients.client() as c:
        for path in ("/server_info", "/get_server_info"):
            with contextlib.suppress(httpx.HTTPError, ValueError):
                res = c.get(url + path, timeout=timeout)
                if res.status_code == 200:
                    data = res.json()
                    if isinstance(data, dict):
                        return dict(data), path
    return {}, ""


def describe(eff: EffectiveConfig | None) -> str:
    """One line for reports: `EAGLE draft 4 steps 3 topk 1, graphs bs<=16 [1..16], triton`."""
    if eff is None:
        return "effective config unknown"
    parts = [eff.algorithm or "no speculative algorithm"]
    for label, v in (("draft", eff.draft_tokens), ("steps", eff.num_steps),
                     ("topk", eff.topk), ("tree budget", eff.tree_budget)):
        if v is not None:
            parts.append(f"{label} {v}")
    out = " ".join(parts)
    if eff.cuda_graph is False:
        out += ", eager"
    elif eff.max_captured_bs is not None:
        out += f", graphs bs<={eff.max_captured_bs}"
        if eff.cuda_graph_bs:
            out += f" ({len(eff.cuda_graph_bs)} sizes)"
    if eff.attention_backend:
        out += f", {eff.attention_backend}"
    return f"{out} [{eff.source}]"


def _first(info: Mapping[str, Any], keys: Sequence[str]) -> Any:
    for k in keys:
        if info.get(k) is not None:
            return info[k]
    return None


def _int(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if v != v or abs(v) > 1 << 40:  # NaN / absurd
        return None
    return int(v)


def _str(v: Any) -> str | None:
    if not isinstance(v, str) or not v or len(v) > _MAX_STR:
        return None
    return v if v.isprintable() else None


def _int_list(v: Any) -> tuple[int, ...] | None:
    if not isinstance(v, (list, tuple)) or not v or len(v) > _MAX_LIST:
        return None
    out = [_int(x) for x in v]
    if any(x is None or x < 1 for x in out):
        return None
    return tuple(x for x in out if x is not None)
