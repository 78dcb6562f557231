"""Running one planned cell on one host's session: patches around it, the cell, its log.

The cell itself is `ddprobe.cell.experiment.run_cell` (restart with the config, health wait,
probes, classification), or `run_sanitize_cell` for a compute-sanitizer cell. Around it this
module applies the cell's temporary patch (the oversize experiment's, or --confirm-patch's)
and always reverts it, and copies the server log of the cell into the run directory.
Infrastructure failures become an `error` cell (a skip), never a failure of the server.
"""
from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ddprobe import interrupt
from ddprobe.bisect.cells import PlannedCell
from ddprobe.bisect.cheap import CHEAP_PROBE_TOKENS, CheapSupport
from ddprobe.bisect.reconnect import RETRIES_PER_CELL, reconnect
from ddprobe.bisect.session import HostSession, revert_leftovers
from ddprobe.cell.experiment import CellReporter, ProbeOptions, run_cell, run_sanitize_cell
from ddprobe.defaults import OVERSIZE_FACTOR, PROBE_CONCURRENCY
from ddprobe.errors import DdprobeError, HostGone, LockedError, PatchError, RemoteError
from ddprobe.inventory import Host
from ddprobe.probes.coding import load_suite
from ddprobe.results import CellKind, CellResult, Config, Outcome
from ddprobe.sources import Patch
from ddprobe.sources.buffers import BufferReport
from ddprobe.sources.oversize import make_oversize_patch
from ddprobe.sources.patches import (
    applied_ids,
    apply_patch,
    load_patch,
    patch_status,
    revert_patch,
)
from ddprobe.timestamps import utc_stamp
from ddprobe.untrusted import file_part, first_chars

PROGRESS_LINE_CAP = 100  # characters of the server's last log line a progress line shows

log = logging.getLogger("ddprobe.bisect")
LOG_CAP = 4 << 20


def probe_options(tasks: tuple[str, ...] | list[str] = (), *,
                  concurrency: int = PROBE_CONCURRENCY) -> ProbeOptions | None:
    """The cell's ProbeOptions for `tasks` (ids, or one number N: the suite's first N tasks)
    and `concurrency` (tasks in flight); None: the cell's default (the whole coding suite)."""
    if not tasks and concurrency == PROBE_CONCURRENCY:
        return None
    # N or unknown ids: resolved, or one clear error, before any restart
    ids = tuple(t.id for t in load_suite("coding").select(tasks)) if tasks else None
    return ProbeOptions(tasks=ids, concurrency=concurrency)


def error_cell(host: Host, config: Config, why: str, *,
               kind: CellKind = "cell") -> CellResult:
    return CellResult(host=host.name, config=config, outcome=Outcome.ERROR, error=why,
                      started_at=utc_stamp(), kind=kind)


class CellRunner:
    """Runs planned cells; one instance per run (shared by the groups' threads)."""

    def __init__(self, *, run_dir: Path | None, reports: dict[str, BufferReport] | None = None,
                 oversize_factor: int = OVERSIZE_FACTOR,
                 progress: Callable[[str], None] | None = None,
                 probe: ProbeOptions | None = None,
                 on_note: Callable[[str], None] | None = None) -> None:
        self.run_dir = run_dir
        self.reports = reports or {}  # group key -> the grep-buffers report behind its suspects
        self.factor = oversize_factor
        self.progress = progress
        self.on_note = on_note  # run-level notes (a reconnect): journaled and shown
        self.probe = probe or ProbeOptions()  # default: the whole coding suite
        self.cheap: dict[str, CheapSupport] = {}  # group key -> how its cheap cells launch

    def run(self, s: HostSession, cell: PlannedCell, *, group: str) -> CellResult:
        """Run one planned cell. A result seen through a dropped connection is discarded:
        reconnect (bounded backoff) and run the cell again; HostGone when the host stays away
        (the run then stops unfinished and `--resume` runs this cell)."""
        notes: list[str] = []
        for attempt in range(RETRIES_PER_CELL + 1):
            try:
                res = self._run_once(s, cell, group=group)
            except RemoteError as e:
                if s.r.connected or isinstance(e, HostGone):
                    raise
                why = f"{cell.key}: {e}"
            else:
                if s.r.connected:
                    if notes:
                        res = replace(res, notes=list(res.notes) + notes)
                    return res
                why = f"during {cell.key}; its result ({res.outcome.value}) is discarded"
            if attempt == RETRIES_PER_CELL:
                raise HostGone(f"{s.host.name}: the ssh connection dropped {attempt + 1} "
                               f"times in a row running {cell.key}")
            note = reconnect(s, why=why, progress=self.progress)
            notes.append(note)
            for n in revert_leftovers(s):  # the dropped cell's temporary patch, if any
                notes.append(n)
            if self.on_note is not None:
                self.on_note(note + f"; running {cell.key} again")
        raise AssertionError("unreachable")

    def _run_once(self, s: HostSession, cell: PlannedCell, *, group: str) -> CellResult:
        t0 = time.monotonic()
        patch: Patch | None = None
        try:
            if cell.buffers:
                rep = self.reports.get(group)
                if rep is None:
                    raise PatchError("no grep-buffers analysis to build the oversize patch from")
                patch = make_oversize_patch(rep, cell.buffers, cell.factor or self.factor)
            elif cell.patch:
                patch = load_patch(cell.patch)
        except PatchError as e:
            return self._finish(s, cell, error_cell(s.host, cell.config, f"patch: {e}"), t0, [])
        applied: list[str] = []
        try:
            if patch is not None:
                try:
                    res = apply_patch(s.r, patch, host=s.host)
                    applied.append(res.patch_id)
                except PatchError as e:
                    return self._finish(s, cell, error_cell(s.host, cell.config,
                                                            f"patch: {e}"), t0, [])
            result = self._cell(s, cell, keep=applied, group=group)
        except BaseException:
            with interrupt.shielded():
                if patch is not None and not applied and s.r.connected:
                    # Ctrl-C during the apply: the host finished it (the agent waits for the
                    # reply first), so look in the ledger
                    with contextlib.suppress(DdprobeError):
                        if patch.id in applied_ids(patch_status(s.r, host=s.host)):
                            applied.append(patch.id)
                for pid in applied:
                    revert_patch(s.r, pid, host=s.host)
                    interrupt.cleaned(f"reverted the temporary patch {pid} on {s.host.name}")
            raise
        else:
            for pid in applied:
                # never leave a temporary patch behind: a failed revert stops the run
                revert_patch(s.r, pid, host=s.host)
        return self._finish(s, cell, result, t0, applied)

    def _cell(self, s: HostSession, cell: PlannedCell, *, keep: list[str],
              group: str) -> CellResult:
        log_dir = self.run_dir / "logs" if self.run_dir else None
        try:
            if cell.purpose == "sanitize":
                sup = self.cheap.get(group) if cell.cheap else None
                if cell.cheap and (sup is None or not sup.available):
                    return error_cell(s.host, cell.config, "cheap cells are not available here",
                                      kind="sanitize")
                cfg = sup.config(cell.config) if sup is not None else cell.config
                res = run_sanitize_cell(s.r, s.host, cfg, log_dir=log_dir, lock=s.lock,
                                        caches=s.caches)
                if sup is None:
                    return res
                return replace(res, config=cell.config, cheap=True, notes=[
                    *res.notes, f"ran cheap ({sup.what(cell.config)}): invalid writes are "
                                "this config's; a clean report proves nothing"])
            reporter = (_reporter(s.host.name, cell.key, self.progress)
                        if self.progress is not None else None)
            if cell.cheap:
                return self._cheap_cell(s, cell, group, log_dir, reporter, keep)
            return run_cell(s.r, s.host, cell.config, probe=self.probe, log_dir=log_dir,
                            reporter=reporter, lock=s.lock, caches=s.caches,
                            keep_patches=tuple(keep),
                            # for the graph-vs-eager differential
                            keep_answers=cell.purpose in ("frontier", "eager", "sweep",
                                                          "compare", "oversize", "max_bs",
                                                          "residual"))
        except LockedError:
            raise
        except RemoteError as e:
            if not s.r.connected:
                raise  # not a result: CellRunner.run reconnects and runs the cell again
            return error_cell(s.host, cell.config, f"{type(e).__name__}: {e}", kind=cell.kind)

    def _cheap_cell(self, s: HostSession, cell: PlannedCell, group: str, log_dir: Path | None,
                    reporter: CellReporter | None, keep: list[str]) -> CellResult:
        """The cell with dummy weights, few captured sizes, no warm-up and a probe that stops
        once the server died; recorded under the planned config, marked cheap."""
        sup = self.cheap.get(group)
        if sup is None or not sup.available:
            return error_cell(s.host, cell.config, "cheap cells are not available here")
        probe = replace(self.probe, max_tokens=min(self.probe.max_tokens, CHEAP_PROBE_TOKENS),
                        timeout=min(self.probe.timeout, 120.0), stop_when_dead=True)
        res = run_cell(s.r, s.host, sup.config(cell.config), probe=probe, log_dir=log_dir,
                       reporter=reporter, lock=s.lock, caches=s.caches,
                       keep_patches=tuple(keep))
        note = (f"ran cheap ({sup.what(cell.config)}, probes of {probe.max_tokens} tokens "
                "that stop once the server died): a crash is this config's crash; no crash "
                "proves nothing about ok vs garbage")
        return replace(res, config=cell.config, cheap=True, notes=[*res.notes, note])

    def _finish(self, s: HostSession, cell: PlannedCell, res: CellResult, t0: float,
                applied: list[str]) -> CellResult:
        wall_s = res.wall_s if res.wall_s is not None else round(time.monotonic() - t0, 3)
        res = replace(res, patches=list(res.patches) + [p for p in applied
                                                         if p not in res.patches],
                      kind=cell.kind, wall_s=wall_s)
        if self.run_dir is not None:
            res = self._copy_log(s, cell, res)
        return res

    def _copy_log(self, s: HostSession, cell: PlannedCell, res: CellResult) -> CellResult:
        src = res.log_path
        if not src or res.local_log:
            return res
        dest = (self.run_dir / "logs"  # type: ignore[operator]
                / f"{file_part(s.host.name)}-{file_part(cell.key)}.log")
        if Path(src).resolve() == dest.resolve():
            return res
        try:
            # the end only, read on the host: a runaway log may be gigabytes
            data = s.r.run(["tail", "-c", str(LOG_CAP), src], timeout=120,
                           check=True).stdout.encode("utf-8", "surrogateescape")
        except (DdprobeError, OSError) as e:
            log.debug("cannot copy %s: %s", src, e)
            return res
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data[-LOG_CAP:])
        return replace(res, local_log=str(dest))


def _reporter(host: str, key: str, progress: Callable[[str], None]) -> CellReporter:
    """A CellReporter that turns stages into progress lines (health throttled)."""

    class _Rep(CellReporter):
        last = 0.0

        def stage(self, name: str, detail: str = "") -> None:
            progress(f"{host}: {key}: {name}" + (f" {detail}" if detail else ""))

        def health(self, elapsed: float, timeout: float, stage: str, last_line: str) -> None:
            if elapsed - self.last >= 10.0:
                self.last = elapsed
                progress(f"{host}: {key}: waiting for health {elapsed:.0f}s/{timeout:.0f}s"
                         + (f": {first_chars(last_line, PROGRESS_LINE_CAP)}" if last_line else ""))

    return _Rep()
