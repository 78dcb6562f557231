"""Running one planned cell on one host: patches around it, the experiment cell, its log.

The cell itself is `ddprobe.cell.experiment.run_cell` (restart with the config, health wait, probes,
classification). Around it this module applies the cell's temporary patch (the oversize
experiment's, or --confirm-patch's) and always reverts it, and copies the server log of the
cell into the run directory. Infrastructure failures become an `error` cell (a skip), never a
failure of the server.
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ddprobe import interrupt
from ddprobe.bisect.cells import PlannedCell
from ddprobe.bisect.reconnect import RETRIES_PER_CELL, reconnect
from ddprobe.errors import DdprobeError, HostGone, LockedError, PatchError, RemoteError, UsageError
from ddprobe.facts import Facts, gather_facts
from ddprobe.inventory import Host
from ddprobe.remote import Remote, connect
from ddprobe.results import CellResult, Config, Outcome
from ddprobe.sources.buffers import BufferReport
from ddprobe.sources.oversize import make_oversize_patch
from ddprobe.sources.patches import (
    applied_ids,
    apply_patch,
    load_patch,
    patch_status,
    revert_patch,
    revert_temporary,
)
from ddprobe.untrusted import file_part

log = logging.getLogger("ddprobe.bisect")
LOG_CAP = 4 << 20


@dataclass
class HostSession:
    """One host for a whole run: its connection, facts, and the run's lock on it."""

    host: Host
    r: Remote
    facts: Facts | None = None
    lock: Any = None  # the run's HostLock (re-entered by every cell)
    notes: list[str] = field(default_factory=list)


def open_session(stack: ExitStack, host: Host, *, command: str, break_lock: bool = False,
                 lock: bool = True) -> HostSession:
    r = connect(host)
    s = HostSession(host, r)
    # close whichever connection the session has at the end (a reconnect replaces s.r)
    stack.callback(lambda: s.r.close())
    # the install must be in place before grep-buffers reads it (the testbed host installs
    # itself on first use; once per process, so the cells' own prepare step is a no-op)
    from ddprobe.server.prepare import prepare_host
    note = prepare_host(r, host)
    if note:
        s.notes.append(f"{host.name}: {note}")
    s.facts = gather_facts(r, host)
    if lock:
        from ddprobe.server.lock import HostLock, read_lock
        held = read_lock(r, host)
        # a stale lock left by an interrupted run of this same run id may be taken over
        brk = break_lock or bool(held is not None and command and command in held.command)
        s.lock = stack.enter_context(HostLock(r, host, command=command, break_lock=brk))
        if s.lock.took_over and s.lock.broken is not None:
            stopped = stop_server(s)
            s.notes.append(f"{host.name}: took over the lock of a run that died "
                           f"({s.lock.broken.describe()})"
                           + (f"; {stopped.split(': ', 1)[-1]} (it was left running)"
                              if stopped else ""))
    return s


def stop_server(s: HostSession) -> str:
    """Stop the last cell's server (a bisect leaves no test config running)."""
    from ddprobe.server.manager import get_manager
    try:
        st = get_manager(s.r, s.host).stop()
    except DdprobeError as e:
        return f"{s.host.name}: could not stop the server: {e}"
    if not st.was_running:
        return ""
    return f"{s.host.name}: server stopped" + ("" if st.clean else f" ({st.problem()})")


def stop_all(sessions: dict[str, HostSession]) -> None:
    """Ctrl-C: stop every host's last server (the interrupted cell stopped its own; the one a
    finished cell left running for the next restart is stopped here)."""
    with interrupt.shielded():
        for sess in sessions.values():
            msg = stop_server(sess)
            if msg:
                interrupt.cleaned(msg)


def revert_leftovers(s: HostSession) -> list[str]:
    """Revert oversize patches an interrupted run left applied (they are ddprobe's own)."""
    try:
        return revert_temporary(s.r, s.host)[0]
    except PatchError:
        raise
    except DdprobeError as e:
        return [f"{s.host.name}: patch status unavailable: {e}"]


def experiment_api() -> tuple[Callable[..., CellResult] | None, Callable[..., CellResult] | None,
                              str]:
    """(run_cell, run_sanitize_cell or None, why-not) from ddprobe.cell.experiment, if present."""
    try:
        from ddprobe.cell import experiment
    except ImportError as e:
        return None, None, f"ddprobe.cell.experiment is not available ({e})"
    run = getattr(experiment, "run_cell", None)
    san = getattr(experiment, "run_sanitize_cell", None)
    return run, san, "" if san else "ddprobe.cell.experiment has no sanitize support yet"


def _kwargs(fn: Callable[..., Any], wanted: dict[str, Any]) -> dict[str, Any]:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return wanted
    return {k: v for k, v in wanted.items() if k in params}


def probe_options(tasks: tuple[str, ...] | list[str] = ()) -> Any:
    """experiment.ProbeOptions for `tasks` (ids, or one number N: the suite's first N tasks);
    None: the experiment's default (the whole coding suite)."""
    if not tasks:
        return None
    from ddprobe.cell.experiment import ProbeOptions
    from ddprobe.probes.coding import load_suite
    ids = list(tasks)
    if len(ids) == 1 and ids[0].isdigit():
        n = int(ids[0])
        if n < 1:
            raise UsageError("--tasks N needs N >= 1")
        ids = [t.id for t in load_suite("coding").tasks[:n]]
    else:
        load_suite("coding").select(ids)  # unknown ids: one clear error before any restart
    return ProbeOptions(tasks=tuple(ids))


def error_cell(host: Host, config: Config, why: str, *, kind: str = "cell") -> CellResult:
    return CellResult(host=host.name, config=config, outcome=Outcome.ERROR, error=why,
                      started_at=time.strftime("%Y-%m-%dT%H:%M:%S"), kind=kind)


class Executor:
    """Runs planned cells; one instance per run (shared by the groups' threads)."""

    def __init__(self, *, run_dir: Path | None, reports: dict[str, BufferReport] | None = None,
                 oversize_factor: int = 4, progress: Callable[[str], None] | None = None,
                 run_cell: Callable[..., CellResult] | None = None,
                 run_sanitize: Callable[..., CellResult] | None = None,
                 probe: Any = None, on_note: Callable[[str], None] | None = None) -> None:
        self.run_dir = run_dir
        self.reports = reports or {}  # group key -> the grep-buffers report behind its suspects
        self.factor = oversize_factor
        self.progress = progress
        self.on_note = on_note  # run-level notes (a reconnect): journaled and shown
        self.probe = probe  # experiment.ProbeOptions, or None for the experiment's default
        api_run, api_san, _ = experiment_api()
        self._run = run_cell or api_run
        self._san = run_sanitize or api_san

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
        patch = None
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
            result = self._cell(s, cell, keep=applied)
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

    def _cell(self, s: HostSession, cell: PlannedCell, *, keep: list[str]) -> CellResult:
        fn = self._san if cell.purpose == "sanitize" else self._run
        if fn is None:
            return error_cell(s.host, cell.config, "no experiment cell available in this "
                              "ddprobe (ddprobe.cell.experiment missing)", kind=cell.kind)
        log_dir = self.run_dir / "logs" if self.run_dir else None
        wanted: dict[str, Any] = {"log_dir": log_dir, "lock": s.lock,
                                  "keep_patches": tuple(keep)}
        if cell.purpose in ("frontier", "eager", "sweep"):
            wanted["keep_answers"] = True  # for the graph-vs-eager differential
        if self.progress is not None:
            wanted["reporter"] = _reporter(s.host.name, cell.key, self.progress)
        if self.probe is not None:
            wanted["probe"] = self.probe
        kw = _kwargs(fn, {k: v for k, v in wanted.items() if v is not None})
        try:
            return fn(s.r, s.host, cell.config, **kw)
        except LockedError:
            raise
        except RemoteError as e:
            if not s.r.connected:
                raise  # not a result: Executor.run reconnects and runs the cell again
            return error_cell(s.host, cell.config, f"{type(e).__name__}: {e}", kind=cell.kind)

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


def _reporter(host: str, key: str, progress: Callable[[str], None]) -> Any:
    """An experiment.CellReporter that turns stages into progress lines (health throttled)."""
    from ddprobe.cell.experiment import CellReporter

    class _Rep(CellReporter):
        last = 0.0

        def stage(self, name: str, detail: str = "") -> None:
            progress(f"{host}: {key}: {name}" + (f" {detail}" if detail else ""))

        def health(self, elapsed: float, timeout: float, stage: str, last_line: str) -> None:
            if elapsed - self.last >= 10.0:
                self.last = elapsed
                progress(f"{host}: {key}: waiting for health {elapsed:.0f}s/{timeout:.0f}s"
                         + (f": {last_line[:100]}" if last_line else ""))

    return _Rep()
