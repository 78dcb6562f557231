"""Reading an existing Ansible inventory (INI, YAML, or the JSON of `ansible-inventory --list`)
so a fleet's hosts are not written twice.

The result is ddprobe's own inventory shape (`{"hosts": {name: {key: value}}, "groups":
{group: [host, ...]}}`), which `ddprobe.inventory.parse_inventory` then checks like hosts.yaml.
Variables become ddprobe keys:

    ansible_host (ansible_ssh_host)                     -> host
    ansible_user (ansible_ssh_user)                     -> user
    ansible_port (ansible_ssh_port)                     -> port
    ansible_ssh_private_key_file (ansible_private_key_file) -> identity_file
    ansible_connection: local                           -> transport: local
    ddprobe_<key> (ddprobe_python, ddprobe_server, ...) -> <key>

`ansible_python_interpreter` is *not* used: it is the interpreter Ansible's modules run with,
not necessarily the one the SGLang server runs with; set `ddprobe_python` (or `python` in
hosts.yaml's defaults). Variable precedence follows Ansible: `all` group vars, then parent
groups before children, then host vars. Every group's hosts include its children's (groups
of groups). Nothing is executed: no dynamic inventory scripts, no plugins, no Jinja.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ddprobe.errors import ConfigError
from ddprobe.yamlio import LineDict, load_yaml

_CONN_VARS = {"ansible_host": "host", "ansible_ssh_host": "host", "ansible_user": "user",
              "ansible_ssh_user": "user", "ansible_port": "port", "ansible_ssh_port": "port",
              "ansible_ssh_private_key_file": "identity_file",
              "ansible_private_key_file": "identity_file"}
_DDPROBE_KEYS = ("host", "user", "port", "identity_file", "python", "package", "env", "server",
                 "labels", "transport")


class _Inv:
    def __init__(self, path: str) -> None:
        self.path = path
        self.host_vars: dict[str, dict[str, Any]] = {}
        self.host_line: dict[str, int] = {}
        self.group_hosts: dict[str, list[str]] = {}
        self.group_vars: dict[str, dict[str, Any]] = {}
        self.children: dict[str, list[str]] = {}
        self.group_line: dict[str, int] = {}

    def group(self, g: str, line: int | None = None) -> None:
        self.group_hosts.setdefault(g, [])
        self.group_vars.setdefault(g, {})
        self.children.setdefault(g, [])
        if line is not None:
            self.group_line.setdefault(g, line)

    def add_host(self, g: str, h: str, hv: dict[str, Any], line: int | None) -> None:
        self.group(g)
        if h not in self.group_hosts[g]:
            self.group_hosts[g].append(h)
        self.host_vars.setdefault(h, {}).update(hv)
        if line is not None:
            self.host_line.setdefault(h, line)

    # -- groups of groups, in Ansible's order ------------------------------------------------
    def members(self, g: str, seen: tuple[str, ...] = ()) -> list[str]:
        if g in seen:
            raise ConfigError(f"group '{g}' contains itself (through {' -> '.join(seen)})",
                              path=self.path, line=self.group_line.get(g))
        out = list(self.group_hosts.get(g, []))
        for c in self.children.get(g, []):
            out += [h for h in self.members(c, (*seen, g)) if h not in out]
        return out

    def ancestry(self) -> list[str]:
        """Groups with parents before children (`all` first), for variable precedence."""
        order: list[str] = []

        def visit(g: str, seen: tuple[str, ...]) -> None:
            if g in seen:
                return
            if g not in order:
                order.append(g)
            for c in self.children.get(g, []):
                visit(c, (*seen, g))
        visit("all", ())
        for g in self.group_hosts:
            visit(g, ())
        return order

    def to_ddprobe(self) -> dict[str, Any]:
        hosts = LineDict()
        hosts.line, hosts.key_lines = 0, {}
        groups: dict[str, list[str]] = {}
        names = list(self.host_vars)
        membership = {g: self.members(g) for g in self.group_hosts}
        order = self.ancestry()
        for h in names:
            merged: dict[str, Any] = {}
            for g in order:
                if g == "all" or h in membership.get(g, []):
                    merged.update(self.group_vars.get(g, {}))
            merged.update(self.host_vars[h])
            hosts[h] = self._host(h, merged)
            hosts.key_lines[h] = self.host_line.get(h, 0)
        for g, hs in membership.items():
            if g in ("all", "ungrouped") or not hs:
                continue
            if g in self.host_vars:
                raise ConfigError(f"group '{g}' has the name of a host", path=self.path,
                                  line=self.group_line.get(g))
            groups[g] = hs
        return {"hosts": hosts, "groups": groups}

    def _host(self, name: str, v: dict[str, Any]) -> LineDict:
        out = LineDict()
        out.line = self.host_line.get(name, 0)
        out.key_lines = {}
        for k, val in v.items():
            k = str(k)
            if k in _CONN_VARS:
                key = _CONN_VARS[k]
                if key == "port":
                    try:
                        val = int(val)
                    except (TypeError, ValueError, OverflowError):
                        raise ConfigError(f"host '{name}': {k} must be a port number, got "
                                          f"{val!r}", path=self.path,
                                          line=self.host_line.get(name)) from None
                out[key] = val if key == "port" else str(val)
            elif k == "ansible_connection":
                if val in ("local",):
                    out["transport"] = "local"
                elif val not in ("ssh", "smart", "paramiko"):
                    raise ConfigError(f"host '{name}': ansible_connection {val!r} is not one "
                                      "ddprobe speaks (ssh, paramiko, smart, local)",
                                      path=self.path, line=self.host_line.get(name))
            elif k.startswith("ddprobe_") and k[len("ddprobe_"):] in _DDPROBE_KEYS:
                out[k[len("ddprobe_"):]] = val
            elif k.startswith("ddprobe_"):
                raise ConfigError(f"host '{name}': unknown variable {k} (known: "
                                  + ", ".join(f"ddprobe_{x}" for x in _DDPROBE_KEYS) + ")",
                                  path=self.path, line=self.host_line.get(name))
        return out


# ----- formats -----------------------------------------------------------------------------

_RANGE = re.compile(r"\[([0-9a-z]+):([0-9a-z]+)(?::(\d+))?\]")


MAX_RANGE_HOSTS = 10_000  # one host line's ranges expand to at most this many hosts


def expand_range(name: str, budget: int = MAX_RANGE_HOSTS) -> list[str]:
    """Ansible's host ranges: `gpu[01:04]`, `node-[a:c]`, `x[0:10:5]`; ValueError for a bad
    one, or for ranges that name more than `budget` hosts together."""
    m = _RANGE.search(name)
    if not m:
        return [name]
    lo, hi, step_text = m.group(1), m.group(2), m.group(3) or "1"
    step = int(step_text) if len(step_text) <= 9 else 0
    if step < 1:
        raise ValueError(f"bad host range step in {name!r}")
    if lo.isdigit() and hi.isdigit():
        n = (int(hi) - int(lo)) // step + 1 if len(lo) <= 12 and len(hi) <= 12 else budget + 1
    elif len(lo) == 1 and len(hi) == 1:
        n = (ord(hi) - ord(lo)) // step + 1
    else:
        raise ValueError(f"bad host range in {name!r}")
    if n > budget:
        raise ValueError(f"host ranges in {name!r} name more than {MAX_RANGE_HOSTS} hosts")
    if lo.isdigit():
        width = len(lo) if lo.startswith("0") else 0
        vals = [str(i).zfill(width) for i in range(int(lo), int(hi) + 1, step)]
    else:
        vals = [chr(c) for c in range(ord(lo), ord(hi) + 1, step)]
    out: list[str] = []
    for v in vals:
        out += expand_range(name[:m.start()] + v + name[m.end():], budget // max(1, len(vals)))
    return out


def _ini_value(text: str) -> Any:
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    if re.fullmatch(r"-?\d{1,18}", t):  # a longer run of digits stays text
        return int(t)
    return t


def _ini_pairs(words: list[str], path: str, line: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for w in words:
        if "=" not in w:
            raise ConfigError(f"expected key=value, got {w!r}", path=path, line=line)
        k, _, v = w.partition("=")
        out[k.strip()] = _ini_value(v)
    return out


def parse_ini(text: str, path: str) -> _Inv:
    import shlex
    inv = _Inv(path)
    inv.group("all")
    inv.group("ungrouped")
    section, kind = "ungrouped", "hosts"
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            m = re.fullmatch(r"\[([^\]:]+)(?::(vars|children))?\]", line)
            if not m:
                raise ConfigError(f"bad section header {line!r}", path=path, line=n)
            section, kind = m.group(1), m.group(2) or "hosts"
            inv.group(section, n)
            if section != "all" and section not in inv.children["all"]:
                inv.children["all"].append(section)
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as e:
            raise ConfigError(f"cannot parse: {e}", path=path, line=n) from None
        if not words:
            continue
        if kind == "vars":
            inv.group_vars[section].update(_ini_pairs(words, path, n))
        elif kind == "children":
            inv.group(words[0], n)
            inv.children[section].append(words[0])
        else:
            try:
                names = expand_range(words[0])
            except ValueError as e:
                raise ConfigError(str(e), path=path, line=n) from None
            hv = _ini_pairs(words[1:], path, n)
            for h in names:
                inv.add_host(section, h, hv, n)
    # a child group is not a child of `all` when another group already holds it
    for g in list(inv.children["all"]):
        if any(g in cs for p, cs in inv.children.items() if p != "all"):
            inv.children["all"].remove(g)
    return inv


def parse_yaml(data: Any, path: str) -> _Inv:
    inv = _Inv(path)

    def mapping(v: Any, where: str, parent: Any, key: Any) -> dict[str, Any]:
        if v is None:
            return {}
        if not isinstance(v, dict):
            line = parent.line_of(key) if isinstance(parent, LineDict) else None
            raise ConfigError(f"'{where}' must be a mapping", path=path, line=line)
        return v

    def walk(g: str, body: Any, parent: Any, seen: tuple[str, ...]) -> None:
        line = parent.line_of(g) if isinstance(parent, LineDict) else None
        inv.group(g, line)
        b = mapping(body, g, parent, g)
        for k in b:
            if k not in ("hosts", "vars", "children"):
                raise ConfigError(f"group '{g}': unknown key '{k}' (hosts, vars, children)",
                                  path=path, line=b.line_of(k) if isinstance(b, LineDict)
                                  else None)
        hosts = mapping(b.get("hosts"), f"{g}.hosts", b, "hosts")
        for h, hv in hosts.items():
            hl = hosts.line_of(h) if isinstance(hosts, LineDict) else None
            try:
                names = expand_range(str(h))
            except ValueError as e:
                raise ConfigError(str(e), path=path, line=hl) from None
            for name in names:
                inv.add_host(g, name, dict(mapping(hv, f"{g}.hosts.{h}", hosts, h)), hl)
        inv.group_vars[g].update(mapping(b.get("vars"), f"{g}.vars", b, "vars"))
        kids = mapping(b.get("children"), f"{g}.children", b, "children")
        for c, cb in kids.items():
            if str(c) not in inv.children[g]:
                inv.children[g].append(str(c))
            if str(c) in seen:
                raise ConfigError(f"group '{c}' contains itself", path=path,
                                  line=kids.line_of(c) if isinstance(kids, LineDict) else None)
            walk(str(c), cb, kids, (*seen, g))

    top = mapping(data, "the top level", None, None)
    for g, body in top.items():
        walk(str(g), body, top, ())
    inv.group("all")
    return inv


def parse_list_json(data: dict[str, Any], path: str) -> _Inv:
    """The output of `ansible-inventory --list` (group vars merged into hostvars, or not with
    --export: both are read). Each part must have its shape (ConfigError naming it)."""
    def want(v: Any, kind: type, where: str) -> Any:
        if v is None:
            return kind()
        if not isinstance(v, kind):
            raise ConfigError(f"'{where}' must be a{'n object' if kind is dict else ' list'}",
                              path=path)
        return v

    inv = _Inv(path)
    meta = want(data.get("_meta"), dict, "_meta")
    for g, body in data.items():
        if g == "_meta" or not isinstance(body, dict):
            continue
        inv.group(g)
        for h in want(body.get("hosts"), list, f"{g}.hosts"):
            inv.add_host(g, str(h), {}, None)
        inv.group_vars[g].update(want(body.get("vars"), dict, f"{g}.vars"))
        inv.children[g] += [str(c) for c in want(body.get("children"), list, f"{g}.children")]
    for h, hv in want(meta.get("hostvars"), dict, "_meta.hostvars").items():
        inv.host_vars.setdefault(str(h), {}).update(want(hv, dict, f"_meta.hostvars.{h}"))
    inv.group("all")
    return inv


def sniff(path: Path, text: str) -> str:
    """ini | yaml | json: how an inventory file is written."""
    t = text.lstrip()
    if t.startswith("{"):
        return "json"
    if re.search(r"^\s*\[[^\]]+\]\s*$", text, re.M) and not re.search(r"^\S[^:#]*:\s*$", text,
                                                                       re.M):
        return "ini"
    if path.suffix in (".ini", ".cfg") or (path.suffix == "" and "=" in text and
                                             not re.search(r"^\s*\w+:\s", text, re.M)):
        return "ini"
    return "yaml"


def is_ansible_yaml(data: Any) -> bool:
    """An Ansible YAML inventory: groups at the top level (`all:` ...), not hosts.yaml keys."""
    if not isinstance(data, dict) or not data:
        return False
    if set(data) & {"defaults", "hosts", "groups", "ansible"}:
        return False
    shaped = all(isinstance(v, dict) or v is None for v in data.values()) and all(
        set(v or {}) <= {"hosts", "vars", "children"} for v in data.values())
    # `hostz: {}` is a typo in hosts.yaml, not an Ansible group: ask for real group content
    return shaped and ("all" in data or any(set(v or {}) & {"hosts", "children"}
                                            for v in data.values()))


def load_ansible(path: Path, text: str | None = None) -> dict[str, Any]:
    """An Ansible inventory file (or its `text`, already read) -> ddprobe's inventory shape."""
    if text is None:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"not UTF-8 text (byte {e.start})", path=str(path)) from None
        except OSError as e:
            raise ConfigError(f"cannot read the Ansible inventory: {e.strerror}",
                              path=str(path)) from None
    kind = sniff(path, text)
    if kind == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"invalid JSON: {e.msg}", path=str(path), line=e.lineno) from None
        except (ValueError, RecursionError):  # a number of thousands of digits, deep nesting
            raise ConfigError("invalid JSON: a number too long or nesting too deep",
                              path=str(path)) from None
        if not isinstance(data, dict):
            raise ConfigError("the JSON inventory must be an object of groups (the output of "
                              "`ansible-inventory --list`)", path=str(path), line=1)
        inv = parse_list_json(data, str(path))
    elif kind == "ini":
        inv = parse_ini(text, str(path))
    else:
        inv = parse_yaml(load_yaml(path, text), str(path))
    return inv.to_ddprobe()
