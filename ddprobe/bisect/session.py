"""Opening the hosts of a run: connections, facts, locks, leftovers, groups, static evidence.

Shared by bisect, sweep and smoke. Everything here is I/O through `remote`, `sources` and
`server.lock`; the decisions it feeds are pure (groups, static).
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field

from ddprobe.bisect.executor import HostSession, open_session, revert_leftovers
from ddprobe.bisect.groups import HostGroup, group_hosts, why_apart
from ddprobe.bisect.static import Suspect, find_suspects
from ddprobe.errors import DdprobeError, RemoteError
from ddprobe.facts import gather_facts
from ddprobe.inventory import Host
from ddprobe.remote import Remote
from ddprobe.sources.buffers import BufferReport, SizingParams
from ddprobe.sources.fetch import grep_buffers
from ddprobe.sources.oversize import make_oversize_patch


@dataclass
class Opened:
    sessions: dict[str, HostSession]
    groups: list[HostGroup]
    notes: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # host -> why it was dropped


def open_hosts(stack: ExitStack, hosts: Sequence[Host], *, command: str, parallel: bool = True,
               break_lock: bool = False, lock: bool = True,
               revert: bool = True) -> Opened:
    """Connect, gather facts and lock every host (in parallel); group the identical ones.

    An unreachable host is dropped with a note (the run goes on with the others); when no host
    is left the first error is raised. A host locked by another run stops the whole run, and
    every host opened meanwhile is closed (unlocked) before the error is raised."""

    def one(h: Host) -> tuple[ExitStack, HostSession]:
        sub = ExitStack()
        try:
            s = open_session(sub, h, command=command, break_lock=break_lock, lock=lock)
        except BaseException:
            sub.close()
            raise
        return sub, s

    sessions: dict[str, HostSession] = {}
    notes: list[str] = []
    failed: dict[str, str] = {}
    errors: list[DdprobeError] = []
    opened: list[tuple[Host, ExitStack, HostSession]] = []
    fatal: BaseException | None = None
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(hosts)))) as pool:
        futs = [(h, pool.submit(one, h)) for h in hosts]
        for h, fut in futs:
            # every future is awaited, even after a fatal one: a host opened (and locked) by
            # a worker must be closed here, or the dead run keeps it locked (issue 13)
            while True:
                try:
                    sub, s = fut.result()
                except RemoteError as e:
                    failed[h.name] = str(e)
                    errors.append(e)
                    notes.append(f"{h.name}: unreachable, left out of this run: {e}")
                except BaseException as e:
                    fatal = fatal or e
                    if not fut.done():  # Ctrl-C in this thread: the worker goes on; wait
                        continue
                else:
                    opened.append((h, sub, s))
                break
    if fatal is not None:
        for _, sub, _ in opened:
            with contextlib.suppress(Exception):
                sub.close()
        raise fatal
    for h, sub, s in opened:
        stack.enter_context(sub)
        sessions[h.name] = s
        notes += s.notes
    if not sessions:
        raise errors[0] if errors else DdprobeError("no host to run on")
    if revert:
        for s in sessions.values():
            reverted = revert_leftovers(s)
            if reverted and s.facts is not None:
                # the identity hashes the install's sources: read them as they are now
                s.facts = gather_facts(s.r, s.host)
            notes += reverted
    live = [h for h in hosts if h.name in sessions]
    groups = group_hosts(live, [sessions[h.name].facts for h in live], parallel=parallel)
    if parallel:
        for g in groups[1:]:
            why = why_apart(groups[0].identity, g.identity)
            notes.append(f"{groups[0].hosts[0].name} and {g.hosts[0].name} do not share rounds: "
                         f"{why}")
    return Opened(sessions, groups, notes, failed)


@dataclass(frozen=True)
class StaticEvidence:
    report: BufferReport | None
    suspects: tuple[Suspect, ...]
    notes: tuple[str, ...] = ()


def static_evidence(s: HostSession, *, budgets: Sequence[int], max_bs: int | None,
                    backend: str | None, factor: int = 4,
                    context_len: int | None = None, topk: int | None = None,
                    num_steps: int | None = None) -> StaticEvidence:
    """grep-buffers at the run's budgets, max bs and context length; the suspects an oversize
    patch can enlarge."""
    return host_static_evidence(s.r, s.host, budgets=budgets, max_bs=max_bs, backend=backend,
                                factor=factor, context_len=context_len, topk=topk,
                                num_steps=num_steps)


def host_static_evidence(r: Remote, host: Host, *, budgets: Sequence[int], max_bs: int | None,
                         backend: str | None, factor: int = 4, context_len: int | None = None,
                         topk: int | None = None, num_steps: int | None = None
                         ) -> StaticEvidence:
    """`static_evidence` on a plain connection (no session: `bisect --plan`)."""
    params = SizingParams(max_bs=max_bs, budgets=tuple(budgets), context_len=context_len,
                          topk=topk, num_steps=num_steps)
    try:
        rep = grep_buffers(r, host, backend=backend or "all", params=params)
    except RemoteError:
        raise
    except DdprobeError as e:
        return StaticEvidence(None, (), (f"grep-buffers failed on {host.name}: {e}",))
    notes: list[str] = []
    ok: list[Suspect] = []
    for sus in find_suspects(rep):
        try:
            make_oversize_patch(rep, [sus.attr], factor)
        except DdprobeError as e:
            notes.append(f"suspect {sus.attr} cannot be enlarged by a patch: {e}")
            continue
        ok.append(sus)
    return StaticEvidence(rep, tuple(ok), tuple(notes))
