"""`--host` patterns, the way Ansible reads them (`ansible -i INV 'PATTERN'`, `--limit`).

A pattern is terms joined by `,` (or `:`): a host name, a group name, `all` (or `*`), a glob
(`gpu-*`, `b[0-9]00`), a regex (`~b\\d+`), and each term may be prefixed by `!` (exclude) or
`&` (intersect). As in Ansible, the plain terms are unioned first (in order), then every `&`
term intersects, then every `!` term removes; a pattern of only `!`/`&` terms starts from
`all`. `all` and globs never include the built-in `testbed` host (like Ansible's implicit
localhost): name it to use it.
"""
from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Mapping
from typing import Protocol

from ddprobe.errors import ConfigError

BUILTIN = "testbed"


class Names(Protocol):
    """What a pattern is matched against: the host and group names of an inventory (an
    `Inventory` is one; this module does not import it, which imports this module)."""

    @property
    def hosts(self) -> Mapping[str, object]: ...

    @property
    def groups(self) -> Mapping[str, tuple[str, ...]]: ...

    @property
    def path(self) -> str | None: ...


def split_pattern(spec: str) -> list[str]:
    """Terms of a pattern; `:` separates too, except inside a regex term or brackets."""
    terms: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if part.lstrip("!&").startswith("~") or "[" in part:
            terms.append(part)
        else:
            terms += [t.strip() for t in part.split(":") if t.strip()]
    return terms


def _by_regex(term: str, inv: Names, listed: list[str], key: str) -> list[str]:
    try:
        rx = re.compile(term[1:])
    except re.error as e:
        raise ConfigError(f"bad regex in host pattern {term!r}: {e}", key=key) from None
    hit = [n for n in listed if rx.search(n)]
    hit += [h for g, hs in inv.groups.items() if rx.search(g) for h in hs if h not in hit]
    return hit


def _by_glob(term: str, inv: Names, listed: list[str]) -> list[str]:
    hit = [n for n in listed if fnmatch.fnmatchcase(n, term)]
    for g, hs in inv.groups.items():
        if fnmatch.fnmatchcase(g, term):
            hit += [h for h in hs if h not in hit]
    return hit


def _match(term: str, inv: Names, key: str) -> list[str]:
    """Host names one term names (in inventory order)."""
    listed = [n for n in inv.hosts if n != BUILTIN]
    if term in inv.hosts:
        return [term]
    if term in inv.groups:
        return list(inv.groups[term])
    if term in ("all", "*"):
        return listed
    if term.startswith("~"):
        return _by_regex(term, inv, listed, key)
    if any(c in term for c in "*?["):
        return _by_glob(term, inv, listed)
    names = sorted(inv.hosts) + sorted(inv.groups)
    known = ", ".join(names)
    where = inv.path or "no inventory file (only the built-in host)"
    close = difflib.get_close_matches(term, names, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise ConfigError(f"unknown host or group '{term}' ({hint}known: {known}; inventory: "
                      f"{where})", key=key)


def _terms(spec: str, key: str) -> tuple[list[str], list[str], list[str]]:
    """(plain, `&` and `!` terms) of a pattern, the prefixes taken off."""
    terms = split_pattern(spec)
    if not terms:
        raise ConfigError("no host given", key=key)
    plain = [t for t in terms if t[0] not in "!&"]
    inter = [t[1:] for t in terms if t[0] == "&"]
    excl = [t[1:] for t in terms if t[0] == "!"]
    if any(not t for t in inter + excl):
        raise ConfigError(f"host pattern {spec!r}: `!` and `&` need a name after them", key=key)
    return plain, inter, excl


def select(spec: str, inv: Names, *, key: str = "--host") -> list[str]:
    """The names of the hosts `spec` selects, in inventory order."""
    plain, inter, excl = _terms(spec, key)
    names: list[str] = []
    for t in plain or ["all"]:
        names += [n for n in _match(t, inv, key) if n not in names]
    for t in inter:
        keep = set(_match(t, inv, key))
        names = [n for n in names if n in keep]
    for t in excl:
        drop = set(_match(t, inv, key))
        names = [n for n in names if n not in drop]
    if not names:
        raise ConfigError(f"host pattern {spec!r} matches no host", key=key)
    return names
