"""ddtestbed: a small speculative-decoding server that stands in for SGLang, with planted defects.

In ddprobe's tree it is `ddtestbed`; installed onto a host it is the top-level package
`ddtestbed` (see install.py). It imports nothing outside itself but PyYAML.
"""
from __future__ import annotations

from .version import __version__

__all__ = ["__version__"]
