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


_FlagsKey = tuple[str, str, str, tuple[tuple[str, str], ...]]


class FlagsCache:
    """The flags read per host entry, for one run (the CLI's Context keeps one per invocation):
    the check runs before every restart, the flags change only when the install does."""

    def __init__(self) -> None:
        self._flags: dict[_FlagsKey, FlagSet] = {}
        self._lock = threading.Lock()

    def get(self, key: _FlagsKey) -> FlagSet | None:
        with self._lock:
            return self._flags.get(key)

    def put(self, key: _FlagsKey, flags: FlagSet) -> None:
        with self._lock:
            self._flags[key] = flags


def flags_for(r: Remote, host: Host | None = None, *, refresh: bool = False,
              cache: FlagsCache | None = None) -> FlagSet:
    """`read_flags`, remembered per host entry in `cache` (a fresh one when none is passed:
    pass the run's cache down so a bisect reads them once); refresh=True reads them again
    (the install changed)."""
    h = host if host is not None else r.host
    memo = cache if cache is not None else FlagsCache()
    key: _FlagsKey = (h.name, h.python, h.package, tuple(h.env))
    if not refresh:
        known = memo.get(key)
        if known is not None:
            return known
    fs = read_flags(r, h)
    memo.put(key, fs)
    return fs
