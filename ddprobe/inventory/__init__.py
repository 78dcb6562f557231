"""The inventory: hosts.yaml (+ the built-in `testbed` host) -> typed Host records.

Lookup order: --inventory FILE, $DDPROBE_INVENTORY, ./hosts.yaml, ~/.config/ddprobe/hosts.yaml.
No inventory at all is fine: the built-in `testbed` host is always there.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ddprobe.errors import ConfigError
from ddprobe.yamlio import LineDict, load_yaml

TESTBED = "testbed"


@dataclass(frozen=True)
class ServerSettings:
    """How ddprobe runs the server on a host (used by ddprobe.server)."""

    manager: str = "command"  # command | systemd | docker
    port: int = 30000
    bind: str = "127.0.0.1"  # the address the server listens on (as seen from the host)
    model_path: str = ""
    algorithm: str = "EAGLE"  # --speculative-algorithm
    # how a budget N becomes flags (README "What a budget means"): draft_tokens
    # (--speculative-num-draft-tokens N+1) | ddtree (--speculative-ddtree-budget N) | steps
    # (--speculative-num-steps N --speculative-num-draft-tokens N+1: chains, topk 1)
    budget_flag: str = "draft_tokens"
    budget_args: tuple[str, ...] = ()  # overrides budget_flag: words with {budget}/{draft_tokens}
    draft_model_path: str = ""
    steps: int | None = None  # --speculative-num-steps
    topk: int | None = None  # --speculative-eagle-topk
    budget: int | None = None  # the production budget (smoke)
    max_bs: int | None = None  # the production --cuda-graph-max-bs
    backend: str | None = None  # the production --attention-backend
    args: tuple[str, ...] = ()  # extra launch args, passed through quoted
    env: tuple[tuple[str, str], ...] = ()  # extra environment (e.g. SGLANG_* variables)
    launch: tuple[str, ...] = ()  # argv template; default: {python} -m {package}.launch_server
    unit: str = ""  # systemd unit
    container: str = ""  # docker container name
    image: str = ""  # docker image
    workdir: str = "~/.ddprobe"  # where pidfiles, logs and the lock live on the host
    health_timeout: float = 900.0  # seconds to wait for /health_generate
    # seconds of start-up without a new log byte before the start is reported as a hang
    # (0: off; a weight load or a graph capture logs progress well within it)
    stall_timeout: float = 600.0
    stop_timeout: float = 30.0  # TERM grace period before KILL
    tok_s_min_ratio: float = 0.5  # degraded below this ratio of the baseline tok/s
    # the bisect may run its crash-or-not cells cheap (dummy weights, only the batch sizes
    # the question needs, no warm-up); false: every cell loads the real weights
    cheap_cells: bool = True
    prepare: str = ""  # a step run once before the first start (ddprobe.server.prepare): testbed


@dataclass(frozen=True)
class Host:
    name: str
    host: str = ""  # hostname or ~/.ssh/config alias
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    python: str = "python3"  # the interpreter the server runs with (where SGLang is installed)
    package: str = "sglang"  # the package ddprobe analyses and launches
    env: tuple[tuple[str, str], ...] = ()  # environment for every interpreter / server command
    server: ServerSettings = field(default_factory=ServerSettings)
    labels: tuple[tuple[str, str], ...] = ()
    transport: str = "ssh"  # ssh | local
    source: str = ""  # where this host was defined (file:line or "built-in")

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def labels_dict(self) -> dict[str, str]:
        return dict(self.labels)

    @property
    def target(self) -> str:
        """user@host:port as a person would write it (for messages)."""
        if self.transport == "local":
            return "local"
        s = self.host or self.name
        if self.user:
            s = f"{self.user}@{s}"
        if self.port:
            s = f"{s}:{self.port}"
        return s


@dataclass(frozen=True)
class Inventory:
    hosts: dict[str, Host]
    groups: dict[str, tuple[str, ...]]
    path: str | None = None

    def select(self, spec: str, limit: str | None = None) -> list[Host]:
        """Hosts for a --host value, in Ansible's pattern language (see `hostpattern`):
        names, groups, `all`, globs, `~regex`, `!exclusion`, `&intersection`, joined by `,`
        or `:`; `limit` (--limit) is a second pattern the result is intersected with."""
        from ddprobe.inventory.pattern import select
        out = [self.hosts[n] for n in select(spec, self, key="--host")]
        if limit:
            allowed = set(select(limit, self, key="--limit"))
            out = [h for h in out if h.name in allowed]
            if not out:
                raise ConfigError(f"--limit {limit!r} leaves none of the hosts of {spec!r}",
                                  key="--limit")
        return out

    def listed(self, limit: str | None = None) -> list[Host]:
        """Every host (the built-in testbed included), within `limit` (--limit) if given."""
        out = list(self.hosts.values())
        if limit:
            from ddprobe.inventory.pattern import select
            allowed = set(select(limit, self, key="--limit"))
            out = [h for h in out if h.name in allowed]
        return out

    def get(self, name: str, limit: str | None = None) -> Host:
        hosts = self.select(name, limit)
        if len(hosts) != 1:
            raise ConfigError(f"'{name}' names {len(hosts)} hosts; this command takes one",
                              key="--host")
        return hosts[0]


def testbed_prefix() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "ddprobe" / "testbed"


def builtin_testbed() -> Host:
    """The always-present local host that runs ddprobe's own testbed server.

    It is an ordinary host entry: a local transport, an interpreter, an install directory on
    PYTHONPATH and a package name. ddprobe's logic treats it exactly like an SGLang host.
    """
    prefix = testbed_prefix()
    return Host(
        name=TESTBED, host="localhost", python=sys.executable, package="ddtestbed",
        # simulated time runs 100x faster than the seed's B300 (a restart: 0.7 s, not 6 min)
        env=(("PYTHONPATH", str(prefix / "site")),
             ("DDTESTBED_TIME_SCALE", os.environ.get("DDTESTBED_TIME_SCALE", "0.01")),
             ("DDTESTBED_STARTUP_SCALE", os.environ.get("DDTESTBED_STARTUP_SCALE", "0.002")),
             # facts read the scenario's GPU from the testbed's nvidia-smi stand-in
             ("DDTESTBED_SCENARIO", os.environ.get("DDTESTBED_SCENARIO", "seed")),
             ("DDPROBE_NVIDIA_SMI", shlex.join([sys.executable, "-m", "ddtestbed.nvidia_smi"]))),
        server=ServerSettings(
            port=int(os.environ.get("DDPROBE_TESTBED_PORT", "31830")),
            model_path="ddtestbed/tiny-coder",
            algorithm="DDTREE", budget_flag="ddtree", draft_model_path="ddtestbed/tiny-drafter",
            budget=8, max_bs=64,
            args=("--testbed-scenario", os.environ.get("DDTESTBED_SCENARIO", "seed")),
            workdir=str(prefix / "work"), health_timeout=60.0, prepare="testbed"),
        labels=(("gpu", "NVIDIA B300 SXM6 (simulated)"),), transport="local", source="built-in")


# ----- parsing --------------------------------------------------------------------------------

# POSIX portable names: a name starting with `-` is an option to `env` (`-S` splits and runs
# its value), one holding `=` sets another variable, NUL ends the string on the host.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def env_name_problem(name: str) -> str | None:
    """Why `name` is not a usable environment variable name, or None."""
    if ENV_NAME.match(name):
        return None
    return (f"{name!r} is not a valid environment variable name (letters, digits and `_`, "
            "not starting with a digit)")


_HOST_KEYS = {"host", "user", "port", "identity_file", "python", "package", "env", "server",
              "labels", "transport"}
_TOP_KEYS = {"defaults", "hosts", "groups", "ansible"}
_SERVER_TYPES: dict[str, Any] = {f.name: f.type for f in fields(ServerSettings)}
BUDGET_FLAGS = ("draft_tokens", "ddtree", "steps")
BUDGET_PLACEHOLDERS = ("{budget}", "{draft_tokens}")


def budget_args_problem(words: tuple[str, ...]) -> str:
    """Why a `server.budget_args` template is unusable ("" when it is fine)."""
    import re
    used = False
    for w in words:
        for ph in re.findall(r"\{[^{}]*\}", w):
            if ph not in BUDGET_PLACEHOLDERS:
                return (f"has an unknown placeholder {ph} in {w!r} (known: "
                        f"{', '.join(BUDGET_PLACEHOLDERS)})")
            used = True
    if not used:
        return ("never uses the budget: put {budget} or {draft_tokens} (= budget + 1) in a "
                "word, e.g. [--speculative-num-steps, '{budget}']")
    if not words[0].startswith("--"):
        return f"must start with a flag, got {words[0]!r}"
    return ""


def _type_name(v: Any) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "true/false",
            list: "a list", dict: "a mapping"}.get(type(v), type(v).__name__)


class _Parser:
    def __init__(self, path: str) -> None:
        self.path = path

    def err(self, msg: str, d: Any, key: Any = None) -> ConfigError:
        line = d.line_of(key) if isinstance(d, LineDict) else None
        return ConfigError(msg, path=self.path, line=line, key=None if key is None else str(key))

    def mapping(self, v: Any, parent: Any, key: str) -> LineDict:
        if v is None:
            v = LineDict()
            v.line, v.key_lines = 0, {}
        if not isinstance(v, dict):
            raise self.err(f"'{key}' must be a mapping, got {_type_name(v)}", parent, key)
        return v  # type: ignore[return-value]

    def scalar(self, v: Any, want: tuple[type, ...], parent: Any, key: str) -> Any:
        if isinstance(v, bool) and bool not in want:
            raise self.err(f"'{key}' must be {_type_name(want[0]())}, got true/false", parent, key)
        if float in want and isinstance(v, int) and not isinstance(v, bool):
            if abs(v) > 1e300:
                raise self.err(f"'{key}' is too large a number", parent, key)
            return float(v)
        if not isinstance(v, want):
            raise self.err(f"'{key}' must be {_type_name(want[0]())}, got {_type_name(v)}",
                           parent, key)
        return v

    def str_map(self, v: Any, parent: Any, key: str) -> tuple[tuple[str, str], ...]:
        m = self.mapping(v, parent, key)
        out = []
        for k, val in m.items():
            if not isinstance(val, (str, int, float)) or isinstance(val, bool):
                raise self.err(f"'{key}.{k}' must be a string, got {_type_name(val)}", m, k)
            if key.endswith("env") and env_name_problem(str(k)):
                raise self.err(f"'{key}': {env_name_problem(str(k))}", m, k)
            out.append((str(k), str(val)))
        return tuple(out)

    def str_list(self, v: Any, parent: Any, key: str) -> tuple[str, ...]:
        if not isinstance(v, list):
            raise self.err(f"'{key}' must be a list, got {_type_name(v)}", parent, key)
        for item in v:
            if not isinstance(item, (str, int, float)) or isinstance(item, bool):
                raise self.err(f"'{key}' items must be strings, got {_type_name(item)}", parent,
                               key)
        return tuple(str(x) for x in v)

    def server(self, v: Any, parent: Any, base: ServerSettings) -> ServerSettings:
        m = self.mapping(v, parent, "server")
        kw: dict[str, Any] = {}
        for k, val in m.items():
            if k not in _SERVER_TYPES:
                raise self.err(f"unknown key 'server.{k}' (known: "
                               f"{', '.join(sorted(_SERVER_TYPES))})", m, k)
            t = _SERVER_TYPES[k]
            if k in ("args", "launch", "budget_args"):
                kw[k] = self.str_list(val, m, f"server.{k}")
            elif k == "env":
                kw[k] = self.str_map(val, m, "server.env")
            elif "int" in t and val is None:
                kw[k] = None
            elif "int" in t:
                kw[k] = self.scalar(val, (int,), m, f"server.{k}")
            elif "float" in t:
                kw[k] = self.scalar(val, (float, int), m, f"server.{k}")
            elif t == "bool":
                kw[k] = self.scalar(val, (bool,), m, f"server.{k}")
            else:
                kw[k] = self.scalar(val, (str,), m, f"server.{k}")
        if "manager" in kw and kw["manager"] not in ("command", "systemd", "docker"):
            raise self.err(f"'server.manager' must be command, systemd or docker, got "
                           f"'{kw['manager']}'", m, "manager")
        if "budget_flag" in kw and kw["budget_flag"] not in BUDGET_FLAGS:
            raise self.err(f"'server.budget_flag' must be {', '.join(BUDGET_FLAGS[:-1])} or "
                           f"{BUDGET_FLAGS[-1]}, got '{kw['budget_flag']}'", m, "budget_flag")
        if kw.get("budget_args"):
            problem = budget_args_problem(kw["budget_args"])
            if problem:
                raise self.err(f"'server.budget_args' {problem}", m, "budget_args")
        return replace(base, **kw)

    def host(self, name: str, v: Any, parent: Any, defaults: dict[str, Any],
             dserver: ServerSettings) -> Host:
        m = self.mapping(v, parent, name)
        merged: dict[str, Any] = {}
        for section in (defaults, m):
            for k in section:
                if k not in _HOST_KEYS:
                    raise self.err(f"unknown key '{k}' in host '{name}' (known: "
                                   f"{', '.join(sorted(_HOST_KEYS))})", section, k)
        kw: dict[str, Any] = {"name": name, "source": f"{self.path}:{m.line}"}
        server = dserver
        for k in _HOST_KEYS:
            src = m if k in m else defaults if k in defaults else None
            if src is None:
                continue
            val = src[k]
            if k == "port":
                kw[k] = self.scalar(val, (int,), src, k)
                if not 0 < kw[k] < 65536:
                    raise self.err(f"'port' must be 1..65535, got {kw[k]}", src, k)
            elif k in ("env", "labels"):
                kw[k] = self.str_map(val, src, k)
            elif k == "server":
                if src is m:
                    server = self.server(val, m, dserver)
            elif k == "transport":
                kw[k] = self.scalar(val, (str,), src, k)
                if kw[k] not in ("ssh", "local"):
                    raise self.err("'transport' must be ssh or local", src, k)
            else:
                kw[k] = str(self.scalar(val, (str,), src, k))
        merged = kw
        merged["server"] = server
        if merged.get("transport", "ssh") == "ssh" and not merged.get("host"):
            merged["host"] = name  # the name itself may be an ssh_config alias
        return Host(**merged)


def find_inventory(explicit: str | None = None) -> Path | None:
    if explicit:
        p = Path(explicit).expanduser()
        if not p.is_file():
            raise ConfigError("inventory file not found", path=str(p), key="--inventory")
        return p
    env = os.environ.get("DDPROBE_INVENTORY")
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise ConfigError("inventory file not found (from $DDPROBE_INVENTORY)", path=str(p))
        return p
    for p in (Path("hosts.yaml"), Path.home() / ".config" / "ddprobe" / "hosts.yaml"):
        if p.is_file():
            return p
    return None


def parse_inventory(data: Any, path: str) -> Inventory:
    ps = _Parser(path)
    hosts: dict[str, Host] = {TESTBED: builtin_testbed()}
    groups: dict[str, tuple[str, ...]] = {}
    if data is None:
        return Inventory(hosts, groups, path)
    if not isinstance(data, dict):
        raise ConfigError(f"top level must be a mapping with {', '.join(sorted(_TOP_KEYS))}",
                          path=path, line=1)
    for k in data:
        if k not in _TOP_KEYS:
            raise ps.err(f"unknown top-level key '{k}' (known: {', '.join(sorted(_TOP_KEYS))})",
                         data, k)
    defaults = ps.mapping(data.get("defaults"), data, "defaults")
    dserver = ServerSettings()
    if "server" in defaults:
        dserver = ps.server(defaults["server"], defaults, dserver)
    imported_groups: dict[str, tuple[str, ...]] = {}
    if data.get("ansible") is not None:
        from ddprobe.inventory.ansible import load_ansible
        ref = ps.scalar(data["ansible"], (str,), data, "ansible")
        apath = Path(ref).expanduser()
        if not apath.is_absolute():
            apath = Path(path).parent / apath
        if not apath.is_file():
            raise ps.err(f"'ansible': no inventory file {str(apath)!r}", data, "ansible")
        adata = load_ansible(apath)
        aps = _Parser(str(apath))
        for name, v in adata["hosts"].items():
            hosts[name] = aps.host(name, v, adata["hosts"], defaults, dserver)
        imported_groups = {g: tuple(m) for g, m in adata["groups"].items()}
    hmap = ps.mapping(data.get("hosts"), data, "hosts")
    for name, v in hmap.items():
        if not isinstance(name, str) or not name or "," in name:
            raise ps.err(f"bad host name {name!r}", hmap, name)
        hosts[name] = ps.host(name, v, hmap, defaults, dserver)
    gmap = ps.mapping(data.get("groups"), data, "groups")
    raw: dict[str, tuple[str, ...]] = dict(imported_groups)
    for g, members in gmap.items():
        if g in hosts:
            raise ps.err(f"group '{g}' has the name of a host", gmap, g)
        raw[str(g)] = ps.str_list(members, gmap, f"groups.{g}")

    def expand(g: str, seen: tuple[str, ...]) -> tuple[str, ...]:
        """A group's hosts; a member may be a group (groups of groups)."""
        out: list[str] = []
        for n in raw[g]:
            if n in hosts:
                names: tuple[str, ...] = (n,)
            elif n in raw:
                if n in seen or n == g:
                    raise ps.err(f"group '{g}' contains itself through '{n}'", gmap, g)
                names = expand(n, (*seen, g))
            else:
                raise ps.err(f"group '{g}' names unknown host or group '{n}'", gmap, g)
            out += [x for x in names if x not in out]
        return tuple(out)
    for g in raw:
        groups[g] = expand(g, ())
    return Inventory(hosts, groups, path)


def load_inventory(explicit: str | None = None) -> Inventory:
    path = find_inventory(explicit)
    if path is None:
        return Inventory({TESTBED: builtin_testbed()}, {}, None)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"not UTF-8 text (byte {e.start})", path=str(path)) from None
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror}", path=str(path)) from None
    return inventory_from_text(text, path)


def inventory_from_text(text: str, path: Path) -> Inventory:
    """The inventory a file at `path` holding `text` is: hosts.yaml, or an Ansible inventory
    (INI, YAML or `ansible-inventory --list` JSON). Any problem is a ConfigError naming the
    file (and its line where there is one)."""
    from ddprobe.inventory.ansible import is_ansible_yaml, load_ansible, sniff
    kind = sniff(path, text)
    if kind in ("ini", "json"):
        return parse_inventory(load_ansible(path, text), str(path))
    data = load_yaml(path, text)
    if is_ansible_yaml(data):
        return parse_inventory(load_ansible(path, text), str(path))
    return parse_inventory(data, str(path))
