"""Which hosts are identical (they can share a bisect's rounds) and which differ (pure).

Identical means the facts say so: the same GPUs (name, compute capability and count), the same
driver, the same package, version and hash of the install's sources. Identical hosts run the
cells of one round in parallel, one per host; hosts that differ each run the whole plan, side
by side, and the report compares their answers.

* A host whose GPU facts could not read (no `nvidia-smi`, or it failed) is never identical to
  another: its verdicts would otherwise be measured on a machine nobody knows is the same.
* Labels (`gpu`, `arch` in hosts.yaml) refine the identity (two hosts that facts cannot tell
  apart but the inventory labels differently are split), never override it: a label cannot
  merge hosts whose facts differ, nor give a GPU to a host whose facts found none.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ddprobe.facts import Facts
from ddprobe.inventory import Host


@dataclass(frozen=True)
class Identity:
    gpu: str  # "NVIDIA B300 SXM6 (10.3) x8" from facts, or "unknown GPU"
    driver: str
    package: str
    version: str
    source_hash: str = "?"  # sha256 (16 hex) of the install's .py files, from facts
    labels: str = ""  # the inventory's gpu/arch labels (refine only)
    unique: str = ""  # set when the facts cannot vouch for this host: never merged

    @property
    def known(self) -> bool:
        return not self.unique

    @property
    def key(self) -> str:
        raw = "|".join((self.gpu, self.driver, self.package, self.version, self.source_hash,
                        self.labels, self.unique))
        return hashlib.sha1(raw.encode()).hexdigest()[:8]

    def describe(self) -> str:
        drv = f", driver {self.driver}" if self.driver and self.driver != "-" else ""
        lab = f" [{self.labels}]" if self.labels else ""
        src = f", sources {self.source_hash}" if self.source_hash not in ("", "?") else ""
        return f"{self.gpu}{lab}{drv}, {self.package} {self.version}{src}"

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "driver": self.driver, "package": self.package,
                "version": self.version, "source_hash": self.source_hash,
                "labels": self.labels, "known": self.known, "key": self.key}


def _gpu(facts: Facts | None) -> str:
    if facts is None or not facts.gpus:
        return ""
    names = sorted({f"{g.get('name') or '?'} ({g.get('compute_cap') or g.get('sm') or '?'})"
                    for g in facts.gpus})
    return ", ".join(names) + (f" x{len(facts.gpus)}" if len(facts.gpus) > 1 else "")


def identity(host: Host, facts: Facts | None) -> Identity:
    labels = host.labels_dict
    lab = " ".join(f"{k}={labels[k]}" for k in ("gpu", "arch") if labels.get(k))
    inst = facts.install if facts is not None else None
    gpu = _gpu(facts)
    return Identity(gpu=gpu or "unknown GPU", driver=(facts.driver if facts else None) or "-",
                    package=(inst or {}).get("name") or host.package,
                    version=str((inst or {}).get("version") or "?"),
                    source_hash=str((inst or {}).get("source_hash") or "?"), labels=lab,
                    unique="" if gpu else host.name)


def why_apart(a: Identity, b: Identity) -> str:
    """One line: why two hosts do not share rounds (for the run's notes)."""
    if not a.known or not b.known:
        return "a GPU is unknown (facts found none), so they cannot be assumed identical"
    for name in ("gpu", "driver", "package", "version", "source_hash", "labels"):
        if getattr(a, name) != getattr(b, name):
            return f"{name.replace('_', ' ')} differs: {getattr(a, name)} vs {getattr(b, name)}"
    return ""


@dataclass
class HostGroup:
    identity: Identity
    hosts: list[Host] = field(default_factory=list)
    key: str = ""  # stable across a resume: the identity, plus the host when run alone

    @property
    def name(self) -> str:
        return ",".join(h.name for h in self.hosts)


def group_hosts(hosts: Sequence[Host], facts: Sequence[Facts | None], *,
                parallel: bool = True) -> list[HostGroup]:
    """Groups in first-appearance order; with parallel=False every host is its own group."""
    groups: list[HostGroup] = []
    by_key: dict[str, HostGroup] = {}
    for h, f in zip(hosts, facts, strict=False):
        ident = identity(h, f)
        g = by_key.get(ident.key) if parallel else None
        if g is None:
            g = HostGroup(ident, key=ident.key if parallel else f"{ident.key}-{h.name}")
            groups.append(g)
            if parallel:
                by_key[ident.key] = g
        g.hosts.append(h)
    return groups
