"""`bisect --events FILE|-`: the run as an event stream, one JSON object a line (NDJSON).

Each line is written and flushed as it happens: `type` is the event's kind (`plan`, `static`,
`round`, `cell_start`, `cell_done`, `progress`, `note`, `server`, `run`), with `group`, `text`
and the event's data; `t` is the seconds since the run started. A verdict, the moment it is
final, is `verdict_final`: the journal's line of the same name (the verdict's fields and
`final`: after which cell, and the cells' summed seconds). The last line is always `result`
(the document `--json` prints, and `exit_code`) or `error` (`{"message", "kind",
"exit_code"}`), so a reader can act on each verdict as it arrives and knows when the run ended.
`-` is stdout, which then carries only the stream.
"""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ddprobe.errors import UsageError
from ddprobe.untrusted import clean, dumps_json

if TYPE_CHECKING:
    from ddprobe.bisect.engine import Event


class EventStream:
    """An event sink that writes NDJSON lines; thread-safe (the hosts' threads emit)."""

    def __init__(self, target: str) -> None:
        self.to_stdout = target == "-"
        self._own: IO[str] | None = None
        if self.to_stdout:
            self.out: IO[str] = sys.stdout
        else:
            try:
                self._own = Path(target).open("w", encoding="utf-8")
            except OSError as e:
                raise UsageError(f"--events: cannot write {target}: {e.strerror or e}") from None
            self.out = self._own
        self._lock = threading.Lock()
        self.t0 = time.monotonic()

    def write(self, rec: dict[str, Any]) -> None:
        line = dumps_json({**rec, "t": round(time.monotonic() - self.t0, 3)}, default=_default)
        with self._lock:
            self.out.write(line + "\n")
            self.out.flush()

    def __call__(self, e: Event) -> None:
        self.write(e.to_record())

    def result(self, doc: dict[str, Any], exit_code: int) -> None:
        self.write({"type": "result", **doc, "exit_code": exit_code})

    def error(self, message: str, kind: str, exit_code: int) -> None:
        self.write({"type": "error", "error": {"message": clean(message), "kind": kind,
                                               "exit_code": exit_code}})

    def close(self) -> None:
        if self._own is not None:
            self._own.close()


def _default(o: Any) -> Any:
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)
