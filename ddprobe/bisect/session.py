"""The hosts of a run: sessions (connection, facts, the run's lock), leftovers, groups, static
evidence, and stopping the last server at the end.

Shared by bisect, sweep and smoke. Everything here is I/O through `remote`, `sources` and
`server.lock`; the decisions it feeds are pure (groups, static).
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field

from ddprobe import interrupt
from ddprobe.bisect.groups import HostGroup, group_hosts, why_apart
from ddprobe.bisect.static import Suspect, cleared, evidence_backend, find_suspects
from ddprobe.defaults import OVERSIZE_FACTOR
from ddprobe.errors import DdprobeError, PatchError, RemoteError
from ddprobe.facts import Facts, gather_facts
from ddprobe.inventory import Host
from ddprobe.remote import Remote, RemoteOptions, connect
from ddprobe.server.caches import RunCaches
from ddprobe.server.lock import HostLock, read_lock
from ddprobe.server.prepare import prepare_host
from ddprobe.server.registry import get_manager
from ddprobe.sources.buffers import BufferReport, SizingParams
from ddprobe.sources.fetch import grep_buffers
from ddprobe.sources.oversize import make_oversize_patch
from ddprobe.sources.patches import revert_temporary


@dataclass
class HostSession:
    """One host for a whole run: its connection (and the options it was opened with: a
    reconnect reuses them), the run's caches, facts, and the run's lock on it."""

    host: Host
    r: Remote
    opts: RemoteOptions
    caches: RunCaches  # the run's: prepare once, flags read once, the lock re-entered
    facts: Facts | None = None
    lock: HostLock | None = None  # the run's lock (re-entered by every cell)
    notes: list[str] = field(default_factory=list)


def open_session(stack: ExitStack, host: Host, *, opts: RemoteOptions, caches: RunCaches,
                 command: str, break_lock: bool = False, lock: bool = True) -> HostSession:
    r = connect(host, opts)
    s = HostSession(host, r, opts, caches)
    # close whichever connection the session has at the end (a reconnect replaces s.r)
    stack.callback(lambda: s.r.close())
    # the install must be in place before grep-buffers reads it (the testbed host installs
    # itself on first use; once per run, so the cells' own prepare step is a no-op)
    note = prepare_host(r, host, caches=s.caches)
    if note:
        s.notes.append(f"{host.name}: {note}")
    s.facts = gather_facts(r, host)
    if lock:
        _take_lock(stack, s, command=command, break_lock=break_lock)
    return s


def _take_lock(stack: ExitStack, s: HostSession, *, command: str, break_lock: bool) -> None:
    held = read_lock(s.r, s.host)
    # a stale lock left by an interrupted run of this same run id may be taken over
    brk = break_lock or bool(held is not None and command and command in held.command)
    lk = s.lock = stack.enter_context(HostLock(s.r, s.host, command=command, break_lock=brk,
                                               caches=s.caches))
    if not (lk.took_over and lk.broken is not None):
        return
    stopped = stop_server(s)
    s.notes.append(f"{s.host.name}: took over the lock of a run that died "
                   f"({lk.broken.describe()})"
                   + (f"; {stopped.split(': ', 1)[-1]} (it was left running)"
                      if stopped else ""))


def stop_server(s: HostSession) -> str:
    """Stop the last cell's server (a bisect leaves no test config running)."""
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


@dataclass
class Opened:
    sessions: dict[str, HostSession]
    groups: list[HostGroup]
    notes: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # host -> why it was dropped


@dataclass
class _Attempts:
    """What opening every host in parallel gave: the sessions opened, the hosts dropped."""

    opened: list[tuple[Host, ExitStack, HostSession]] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    errors: list[DdprobeError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fatal: BaseException | None = None


def open_hosts(stack: ExitStack, hosts: Sequence[Host], *, opts: RemoteOptions,
               caches: RunCaches, command: str, parallel: bool = True,
               break_lock: bool = False, lock: bool = True,
               revert: bool = True) -> Opened:
    """Connect, gather facts and lock every host (in parallel); group the identical ones.

    An unreachable host is dropped with a note (the run goes on with the others); when no host
    is left the first error is raised. A host locked by another run stops the whole run, and
    every host opened meanwhile is closed (unlocked) before the error is raised."""
    att = _open_each(hosts, opts=opts, caches=caches, command=command, break_lock=break_lock,
                     lock=lock)
    if att.fatal is not None:
        for _, sub, _ in att.opened:
            with contextlib.suppress(Exception):
                sub.close()
        raise att.fatal
    sessions: dict[str, HostSession] = {}
    notes = att.notes
    for h, sub, s in att.opened:
        stack.enter_context(sub)
        sessions[h.name] = s
        notes += s.notes
    if not sessions:
        raise att.errors[0] if att.errors else DdprobeError("no host to run on")
    if revert:
        notes += _revert_all(sessions)
    live = [h for h in hosts if h.name in sessions]
    groups = group_hosts(live, [sessions[h.name].facts for h in live], parallel=parallel)
    if parallel:
        notes += _apart_notes(groups)
    return Opened(sessions, groups, notes, att.failed)


def _open_one(h: Host, *, opts: RemoteOptions, caches: RunCaches, command: str,
              break_lock: bool, lock: bool) -> tuple[ExitStack, HostSession]:
    sub = ExitStack()
    try:
        s = open_session(sub, h, opts=opts, caches=caches, command=command,
                         break_lock=break_lock, lock=lock)
    except BaseException:
        sub.close()
        raise
    return sub, s


def _open_each(hosts: Sequence[Host], *, opts: RemoteOptions, caches: RunCaches, command: str,
               break_lock: bool, lock: bool) -> _Attempts:
    att = _Attempts()
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(hosts)))) as pool:
        futs = [(h, pool.submit(_open_one, h, opts=opts, caches=caches, command=command,
                                break_lock=break_lock, lock=lock)) for h in hosts]
        for h, fut in futs:
            # every future is awaited, even after a fatal one: a host opened (and locked) by
            # a worker must be closed here, or the dead run keeps it locked (issue 13)
            _await_open(h, fut, att)
    return att


def _await_open(h: Host, fut: Future[tuple[ExitStack, HostSession]], att: _Attempts) -> None:
    while True:
        try:
            sub, s = fut.result()
        except RemoteError as e:
            att.failed[h.name] = str(e)
            att.errors.append(e)
            att.notes.append(f"{h.name}: unreachable, left out of this run: {e}")
        except BaseException as e:
            att.fatal = att.fatal or e
            if not fut.done():  # Ctrl-C in this thread: the worker goes on; wait
                continue
        else:
            att.opened.append((h, sub, s))
        return


def _revert_all(sessions: dict[str, HostSession]) -> list[str]:
    notes: list[str] = []
    for s in sessions.values():
        reverted = revert_leftovers(s)
        if reverted and s.facts is not None:
            # the identity hashes the install's sources: read them as they are now
            s.facts = gather_facts(s.r, s.host)
        notes += reverted
    return notes


def _apart_notes(groups: Sequence[HostGroup]) -> list[str]:
    return [f"{groups[0].hosts[0].name} and {g.hosts[0].name} do not share rounds: "
            f"{why_apart(groups[0].identity, g.identity)}" for g in groups[1:]]


@dataclass(frozen=True)
class StaticEvidence:
    report: BufferReport | None
    suspects: tuple[Suspect, ...]
    notes: tuple[str, ...] = ()


def static_evidence(s: HostSession, *, budgets: Sequence[int], max_bs: int | None,
                    backend: str | None, factor: int = OVERSIZE_FACTOR,
                    context_len: int | None = None, topk: int | None = None,
                    num_steps: int | None = None, effective_backend: str | None = None
                    ) -> StaticEvidence:
    """grep-buffers at the run's budgets, max bs and context length; the suspects an oversize
    patch can enlarge."""
    return host_static_evidence(s.r, s.host, budgets=budgets, max_bs=max_bs, backend=backend,
                                factor=factor, context_len=context_len, topk=topk,
                                num_steps=num_steps, effective_backend=effective_backend)


def host_static_evidence(r: Remote, host: Host, *, budgets: Sequence[int], max_bs: int | None,
                         backend: str | None, factor: int = OVERSIZE_FACTOR,
                         context_len: int | None = None,
                         topk: int | None = None, num_steps: int | None = None,
                         effective_backend: str | None = None) -> StaticEvidence:
    """`static_evidence` on a plain connection (no session: `bisect --plan`). The buffers are
    those of the backend the cells run (static.evidence_backend), named in the first note."""
    params = SizingParams(max_bs=max_bs, budgets=tuple(budgets), context_len=context_len,
                          topk=topk, num_steps=num_steps)
    read, why = evidence_backend(backend, effective_backend, host.server.args,
                                 host.server.backend)
    try:
        rep = grep_buffers(r, host, backend=read, params=params)
    except RemoteError:
        raise
    except DdprobeError as e:
        return StaticEvidence(None, (), (f"grep-buffers failed on {host.name}: {e}",))
    notes: list[str] = [f"static evidence from the buffers of backend {read} ({why})"]
    notes += [f"cleared by size vs use: {c}" for c in cleared(rep)]
    notes += [n for n in rep.notes if n.startswith("--attention-backend ")]
    ok: list[Suspect] = []
    for sus in find_suspects(rep):
        try:
            make_oversize_patch(rep, [sus.attr], factor)
        except DdprobeError as e:
            notes.append(f"suspect {sus.attr} cannot be enlarged by a patch: {e}")
            continue
        ok.append(sus)
    return StaticEvidence(rep, tuple(ok), tuple(notes))
