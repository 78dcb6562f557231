"""What a step's action gets: the host, one lazily opened connection, and the playbook's run.

The playbook is itself a run on disk (`runs/<id>-playbook-...`): cells of `run` steps, and the
cells and verdicts of `sweep`/`bisect` steps are copied into its journal, so one `report` step
renders the whole investigation.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ddprobe import remote as remote_mod
from ddprobe.hostside.patchtext import Patch
from ddprobe.inventory import Host
from ddprobe.remote import Remote, RemoteOptions
from ddprobe.results import CellResult
from ddprobe.server.caches import RunCaches
from ddprobe.store import RunRecord, RunStore


class StepContext:
    def __init__(self, host: Host, store: RunStore | None, *, opts: RemoteOptions,
                 caches: RunCaches | None = None, runs_root: Path | None = None) -> None:
        self.host = host
        self.opts = opts  # how the host is reached (the connection, a sweep/bisect step's)
        self.caches = caches if caches is not None else RunCaches()  # the playbook's run
        self.store = store
        self.runs_root = runs_root
        self.applied: list[tuple[str, Patch]] = []  # patches this playbook applied, in order
        self.runs: list[Path] = []  # run directories that steps produced
        self.report_targets: set[Path] = set()  # run dirs a report step rendered
        self._stack = contextlib.ExitStack()
        self._remote: Remote | None = None
        self.progress: Callable[[str], None] = lambda text: None  # set by the runner per step

    def remote(self) -> Remote:
        """The host's one connection for the whole playbook, opened on first use."""
        if self._remote is None:
            self._remote = self._stack.enter_context(remote_mod.connect(self.host, self.opts))
        return self._remote

    def close(self) -> None:
        self._remote = None
        self._stack.close()

    def add_cell(self, cell: CellResult) -> CellResult:
        """Journal a cell of this playbook; patches the playbook applied are recorded on it."""
        if not cell.patches and self.applied:
            cell = replace(cell, patches=[pid for pid, _ in self.applied])
        if self.store is not None:
            self.store.cell(cell)
        return cell

    def add_record(self, rec: RunRecord) -> None:
        """A sweep/bisect run's cells and verdicts become part of the playbook's run."""
        self.runs.append(rec.dir)
        if self.store is None:
            return
        for c in rec.cells:
            self.store.cell(c)
        for v in rec.verdicts:
            self.store.verdict(v)
        self.store.append({"type": "note", "text": f"cells and verdicts of run {rec.run_id}"})
