"""The one clock of the journals and results: UTC, to the second.

`utc_stamp()` is the journals' form (`2026-12-01T13:26:19`, no offset: run, end and note
events, smoke timestamps); `utc_stamp_tz()` the cells' `started_at` (`2026-12-01T13:26:19+00:00`).
Both forms are what earlier versions wrote, so old journals read the same."""
from __future__ import annotations

from datetime import datetime, timezone


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def utc_stamp() -> str:
    return utc_now().strftime("%Y-%m-%dT%H:%M:%S")


def utc_stamp_tz() -> str:
    return utc_now().isoformat(timespec="seconds")
