"""What a server's log says it really ran: the captured CUDA-graph batch sizes, model loaded.

SGLang logs `Capture cuda graph bs [1, 2, 4, 8, 12, 16]` before capturing (the list is what
`--cuda-graph-max-bs` / `--cuda-graph-bs` became after its own post-parse rewrites), and
`Load weight end. ...` once the weights are in memory. A failure logged before that line
happened before the model was loaded (an import error, NCCL init, a hang at weight loading):
it cannot depend on the draft budget or on CUDA graphs.

Everything here reads untrusted host text: bounded regexes, numbers capped.
"""
from __future__ import annotations

import re
from typing import Any, Final

_CAPTURE_BS: Final = re.compile(r"Capture cuda graph bs \[([0-9, ]{1,2000})\]")
_LOADED: Final = re.compile(r"Load weight end\b")
_MAX_BS: Final = 1 << 20


def captured_bs(log: str) -> list[int] | None:
    """The first captured batch-size list in the log (the target model's), or None."""
    m = _CAPTURE_BS.search(log)
    if m is None:
        return None
    out = [int(x) for x in m.group(1).replace(" ", "").split(",") if x.isdigit()]
    out = [x for x in out if 0 < x <= _MAX_BS]
    return out or None


def model_loaded(log: str) -> bool | None:
    """True once the log says the weights are loaded; False when it never does; None: no log."""
    if not log.strip():
        return None
    return _LOADED.search(log) is not None


def served_facts(log: str) -> dict[str, Any]:
    """The keys a cell records in its `extra`: captured_bs (when logged), model_loaded."""
    out: dict[str, Any] = {"model_loaded": model_loaded(log)}
    bs = captured_bs(log)
    if bs is not None:
        out["captured_bs"] = bs
    return out
