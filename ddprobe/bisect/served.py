"""What a cell's server really ran, read from its result (pure).

The experiment records what the server's own log said (`ddprobe.cell.served`): the captured
CUDA-graph batch sizes and whether the weights were loaded. When the effective configuration
reported by the server is on the result (`CellResult.effective`, from /server_info), it wins.
The planner and the verdicts ask only these functions, never the inventory.
"""
from __future__ import annotations

from typing import Any

from ddprobe.results import CellResult


def _effective(c: CellResult) -> Any:
    return c.extra.get("effective")


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def served_max_bs(c: CellResult | None) -> int | None:
    """The largest batch size the server captured CUDA graphs for, or None when unknown."""
    if c is None:
        return None
    if c.effective is not None and c.effective.max_captured_bs is not None:
        return c.effective.max_captured_bs
    eff = _effective(c)
    for name in ("captured_bs", "cuda_graph_bs"):
        ints = _ints(_get(eff, name))
        if ints:
            return max(ints)
    for name in ("cuda_graph_max_bs", "max_bs"):
        v = _get(eff, name)
        if isinstance(v, int) and v > 0:
            return v
    bs = c.extra.get("captured_bs")
    ints = _ints(bs) if isinstance(bs, list) else None
    return max(ints) if ints else None


def _ints(v: object) -> list[int] | None:
    """A non-empty list or tuple of integers as a list, else None."""
    if not isinstance(v, (list, tuple)):
        return None
    ints = [x for x in v if isinstance(x, int)]
    return ints if ints and len(ints) == len(v) else None


def before_model_load(c: CellResult | None) -> bool:
    """The cell failed before the server had loaded the model (its log never said so)."""
    if c is None or not c.outcome.bad:
        return False
    return c.model_loaded is False
