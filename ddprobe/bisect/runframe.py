"""The frame bisect and sweep share around their cells: the run's directory and journal, the
hosts opened and locked, the groups driven, the servers stopped, the end entry, and the run's
model read back from the journal (ddprobe/runmodel.py): what bisect and sweep return.

    frame = begin_run("sweep", hosts, root=root, resume=resume, on_event=emit, opts=opts, ...)
    frame.start()
    opened = frame.open_hosts(stack, hosts, parallel=True, break_lock=False)
    runs = frame.drive_groups(opened, [lambda: drive(...)])
    model = frame.finish({...})   # the journal's end entry, then load_model(run dir)
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddprobe import interrupt
from ddprobe.bisect.cellrun import CellRunner
from ddprobe.bisect.engine import Event, EventSink, GroupRun, Journal, in_parallel, unfinished
from ddprobe.bisect.session import HostSession, Opened, open_hosts, stop_all, stop_server
from ddprobe.cell.experiment import ProbeOptions
from ddprobe.defaults import OVERSIZE_FACTOR
from ddprobe.errors import HostGone
from ddprobe.inventory import Host
from ddprobe.remote import RemoteOptions
from ddprobe.runmodel import RunModel, load_model
from ddprobe.server.caches import RunCaches
from ddprobe.store import RunRecord, RunStore, runs_root
from ddprobe.timestamps import utc_stamp


def now() -> str:
    """The journal's timestamps (UTC, to the second: ddprobe.timestamps)."""
    return utc_stamp()


@dataclass
class RunFrame:
    command: str  # bisect | sweep
    store: RunStore
    journal: Journal
    emit: EventSink
    resumed: bool
    opts: RemoteOptions  # how the run reaches its hosts (every connection, every reconnect)
    caches: RunCaches  # the run's: prepare once, flags read once, its locks re-entered

    @property
    def run_id(self) -> str:
        return self.store.run_id

    @property
    def tag(self) -> str:
        """What the hosts' locks say holds them."""
        return f"ddprobe {self.command} (run {self.run_id})"

    def note(self, text: str, group: str = "") -> None:
        """A run note: journaled (as `group: text`) and shown."""
        self.journal.note(f"{group}: {text}" if group else text)
        self.emit(Event("note", group, text))

    def start(self) -> None:
        """Show the run's id and directory; a Ctrl-C from here on says how to resume it."""
        self.emit(Event("run", "", f"run {self.run_id} ({self.store.dir})",
                        {"run_id": self.run_id}))
        interrupt.set_resume(f"ddprobe {self.command} --resume {self.run_id}")

    def open_hosts(self, stack: ExitStack, hosts: Sequence[Host], *, parallel: bool,
                   break_lock: bool) -> Opened:
        """Open and lock every host; a run whose hosts cannot be opened is abandoned."""
        try:
            opened = open_hosts(stack, hosts, opts=self.opts, caches=self.caches,
                                command=self.tag, parallel=parallel,
                                break_lock=break_lock)
        except BaseException as e:
            self.journal.abandon(fresh=not self.resumed, why=e)
            raise
        for n in opened.notes:
            self.note(n)
        return opened

    def cell_runner(self, *, probe: ProbeOptions | None,
                    oversize_factor: int = OVERSIZE_FACTOR) -> CellRunner:
        return CellRunner(run_dir=self.store.dir, oversize_factor=oversize_factor,
                          progress=lambda text: self.emit(Event("server", "", text)),
                          probe=probe, on_note=self.note)

    def drive_groups(self, opened: Opened,
                     fns: Sequence[Callable[[], GroupRun]]) -> list[GroupRun]:
        """Drive every group at once. Ctrl-C stops every host's server; a host that stays
        away stops the run unfinished (resumable)."""
        try:
            return in_parallel(fns)
        except KeyboardInterrupt:
            stop_all(opened.sessions)
            raise
        except HostGone as e:
            raise unfinished(e, self.run_id, self.command) from None

    def stop_servers(self, sessions: dict[str, HostSession], *, show: bool = True) -> None:
        """The last cell's server on every host (a run leaves no test config running)."""
        for sess in sessions.values():
            msg = stop_server(sess)
            if not msg:
                continue
            self.journal.note(msg)
            if show:
                self.emit(Event("note", sess.host.name, msg))

    def finish(self, end: dict[str, Any]) -> RunModel:
        """The journal's end entry; the run's model, read back from the journal (the caller
        renders it: the terminal and the files draw from this one model)."""
        self.journal.append({"type": "end", "finished_at": now(), **end})
        return load_model(self.store.dir)


def begin_run(command: str, hosts: Sequence[Host], *, root: Path | None,
              resume: RunRecord | None, on_event: EventSink | None, budgets: Sequence[int],
              options: dict[str, Any], argv: Sequence[str], opts: RemoteOptions,
              caches: RunCaches | None = None) -> RunFrame:
    """The run's directory and journal: a fresh run's header, or the resumed run's own."""
    store = (RunStore(resume.dir) if resume is not None
             else RunStore.create(command, root or runs_root()))
    frame = RunFrame(command, store, Journal(store), on_event or (lambda e: None),
                     resumed=resume is not None, opts=opts,
                     caches=caches if caches is not None else RunCaches())
    if resume is None:
        frame.journal.append({"type": "run", "run_id": store.run_id, "command": command,
                              "argv": list(argv), "hosts": [h.name for h in hosts],
                              "budgets": list(budgets), "started_at": now(),
                              "options": options})
    return frame
