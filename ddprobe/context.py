"""The Context of one `ddprobe` invocation (httpie's `Environment` is the model).

Built once by the CLI (`ddprobe.cli.main`), filled in by the global options and active for the
invocation (`activate`, undone when the command's click context closes): the global options, the
two consoles (stdout carries data, stderr messages), the inventory (loaded on first use), the
remote options every connection is opened with (`connect`), and the run's caches (`caches`:
the install's flags, the prepare steps done, the host locks held; built on first use). Commands
reach it with `current()` and pass what the library needs down explicitly. Nothing here outlives
an invocation: a second `main([...])` in the same process starts from a fresh Context, so no
state leaks between invocations (tests call `main` many times in one process).
"""
from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Console

from ddprobe.inventory import Host, Inventory, load_inventory
from ddprobe.remote import Remote, RemoteOptions, connect
from ddprobe.safeconsole import make_console

if TYPE_CHECKING:
    from ddprobe.server.caches import RunCaches


@dataclass(frozen=True)
class Options:
    """The global command-line options (`ddprobe --help`)."""

    inventory: str | None = None
    ssh_config: str | None = None
    accept_new_host_keys: bool = False
    debug: bool = False
    connect_timeout: float = 15.0
    limit: str | None = None  # --limit PATTERN, applied to every --host
    verbose: int = 0  # -v count

    @property
    def remote(self) -> RemoteOptions:
        return RemoteOptions(ssh_config=self.ssh_config,
                             accept_new_host_keys=self.accept_new_host_keys,
                             connect_timeout=self.connect_timeout)


@dataclass
class Context:
    """One invocation's options, consoles and inventory."""

    options: Options = field(default_factory=Options)
    out: Console = field(default_factory=lambda: make_console(stderr=False))
    err: Console = field(default_factory=lambda: make_console(stderr=True))
    _inventory: Inventory | None = field(default=None, repr=False)
    _caches: RunCaches | None = field(default=None, repr=False)

    @property
    def inventory(self) -> Inventory:
        """The inventory of --inventory (or the default search), loaded on first use."""
        if self._inventory is None:
            self._inventory = load_inventory(self.options.inventory)
        return self._inventory

    @property
    def remote_options(self) -> RemoteOptions:
        return self.options.remote

    @property
    def caches(self) -> RunCaches:
        """This invocation's RunCaches (built on first use; the server package loads then)."""
        if self._caches is None:
            from ddprobe.server.caches import RunCaches
            self._caches = RunCaches()
        return self._caches

    def connect(self, host: Host) -> Remote:
        """One connection to `host` with this invocation's remote options."""
        return connect(host, self.remote_options)

    def hosts(self, spec: str) -> list[Host]:
        """The hosts `spec` (a host, group or comma list) selects, within --limit."""
        return self.inventory.select(spec, self.options.limit)

    def one_host(self, name: str) -> Host:
        """The one host `name` selects, within --limit."""
        return self.inventory.get(name, self.options.limit)

    def listed_hosts(self) -> list[Host]:
        """Every inventory host (the built-in testbed included), within --limit."""
        return self.inventory.listed(self.options.limit)


_active: ContextVar[Context | None] = ContextVar("ddprobe_context", default=None)


def activate(ctx: Context) -> Callable[[], None]:
    """Make `ctx` the invocation's Context; returns the function that undoes it."""
    token = _active.set(ctx)
    return lambda: _active.reset(token)


def current() -> Context:
    """The active Context; outside an invocation (a test calling a renderer, a worker thread):
    a fresh default one, so nothing is shared by accident."""
    ctx = _active.get()
    return ctx if ctx is not None else Context()
