"""Read an install's sources from a host in ONE round-trip, then analyse them locally.

"Text moved once": the helper locates the package, globs the wanted files, follows the imports
that matter (helper allocators for buffers, `srt.arg_groups` for flags) and returns the texts.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from ddprobe.hostside.client import Install, call
from ddprobe.inventory import Host
from ddprobe.remote import Remote
from ddprobe.sources.argrules import ArgRules, find_rules
from ddprobe.sources.buffers import BufferReport, SizingParams, analyse_buffers, wanted_files
from ddprobe.sources.flags import SERVER_ARGS, FlagSet
from ddprobe.sources.flagsrc import parse_flags


@dataclass(frozen=True)
class SourceTexts:
    install: Install
    texts: dict[str, str] = field(repr=False)
    unmatched: tuple[str, ...] = ()


def read_sources(r: Remote, host: Host | None, patterns: Sequence[str], *,
                 follow: str | None = None, follow_prefixes: Sequence[str] = (),
                 follow_depth: int = 1, timeout: float = 120.0) -> SourceTexts:
    h = host if host is not None else r.host
    res = call(r, "read", {"package": h.package, "patterns": list(patterns),
                           "follow": follow, "follow_prefixes": list(follow_prefixes),
                           "follow_depth": follow_depth}, program="sources", timeout=timeout)
    return SourceTexts(Install.from_dict(res["install"]), dict(res["files"]),
                       tuple(res.get("unmatched") or ()))


def grep_buffers(r: Remote, host: Host | None = None, *, backend: str = "all",
                 params: SizingParams | None = None, include_per_batch: bool = False
                 ) -> BufferReport:
    """The buffers an install allocates for CUDA graphs (see `buffers.analyse_buffers`)."""
    src = read_sources(r, host, wanted_files(backend), follow="helpers")
    return analyse_buffers(src.texts, package=src.install.package, version=src.install.version,
                           backend=backend, params=params, include_per_batch=include_per_batch)


def read_flags(r: Remote, host: Host | None = None) -> FlagSet:
    """The launch flags the host's installed server_args.py defines."""
    src = read_sources(r, host, [SERVER_ARGS], follow="prefixes",
                       follow_prefixes=["srt.arg_groups"], follow_depth=3)
    return parse_flags(src.texts, package=src.install.package, version=src.install.version)


def read_arg_rules(r: Remote, host: Host | None = None) -> ArgRules:
    """SGLang's post-parse rules for speculative flags in the host's install (`argrules`)."""
    src = read_sources(r, host, [SERVER_ARGS], follow="prefixes",
                       follow_prefixes=["srt.arg_groups"], follow_depth=3)
    return find_rules(src.texts)


_flags_cache: dict[tuple[str, str, str, tuple[tuple[str, str], ...]], FlagSet] = {}
_flags_lock = threading.Lock()


def flags_for(r: Remote, host: Host | None = None, *, refresh: bool = False) -> FlagSet:
    """`read_flags`, remembered per host entry for this process: the check runs before every
    restart, the flags change only when the install does (then pass refresh=True)."""
    h = host if host is not None else r.host
    key = (h.name, h.python, h.package, tuple(h.env))
    with _flags_lock:
        if not refresh and key in _flags_cache:
            return _flags_cache[key]
    fs = read_flags(r, h)
    with _flags_lock:
        _flags_cache[key] = fs
    return fs
