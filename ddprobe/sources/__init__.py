"""Sources and patches: install lookup, grep, grep-buffers (ast), flags (ast), patches + ledger.

Everything reads the host's installed package as text (never importing it) through one helper
program per operation; the analysis runs locally. Entry points:

    find_install(r, host) -> Install
    grep(r, pattern, host=...) -> GrepResult;  grep_hosts(hosts, pattern) -> [HostGrep]
    grep_buffers(r, host, backend=, params=SizingParams(...)) -> BufferReport
    read_flags(r, host) -> FlagSet   (FlagSet.check(argv), FlagSet.pick(*spellings))
    load_patch(spec) -> Patch; apply_patch / revert_patch / patch_status / patch_diff
    make_oversize_patch(report, attrs, factor=OVERSIZE_FACTOR) -> Patch   (ddprobe/defaults.py)
"""
from __future__ import annotations

from ddprobe.hostside.client import Install, find_install
from ddprobe.hostside.patchtext import Patch, PatchTextError, parse_patch
from ddprobe.sources.buffers import BufferReport, BufferRow, SizeAt, SizingParams, analyse_buffers
from ddprobe.sources.fetch import flags_for, grep_buffers, read_flags, read_sources
from ddprobe.sources.flags import Flag, FlagSet
from ddprobe.sources.flagsrc import parse_flags
from ddprobe.sources.grep import GrepHit, GrepResult, compare, grep, grep_hosts
from ddprobe.sources.oversize import make_oversize_patch
from ddprobe.sources.patches import (
                                     ApplyResult,
                                     PatchStatus,
                                     RevertResult,
                                     apply_patch,
                                     load_patch,
                                     patch_diff,
                                     patch_status,
                                     revert_patch,
)

__all__ = [
    "ApplyResult", "BufferReport", "BufferRow", "Flag", "FlagSet", "GrepHit", "GrepResult",
    "Install", "Patch", "PatchStatus", "PatchTextError", "RevertResult", "SizeAt",
    "SizingParams", "analyse_buffers", "apply_patch", "compare", "find_install", "flags_for",
    "grep", "grep_buffers", "grep_hosts", "load_patch", "make_oversize_patch", "parse_flags",
    "parse_patch", "patch_diff", "patch_status", "read_flags", "read_sources", "revert_patch",
]
