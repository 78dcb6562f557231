"""Which hosts are identical (they can share a bisect's rounds) and which differ (pure).

Identical means: same GPU model and architecture, same driver, same package and version of the
install the server runs. Identical hosts run the cells of one round in parallel, one per host;
hosts that differ each run the whole plan, side by side, and the report compares their answers.
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
    gpu: str  # "NVIDIA B300 SXM6 x8 (sm_103)" or a host label, or "no GPU"
    driver: str
    package: str
    version: str

    @property
    def key(self) -> str:
        raw = "|".join((self.gpu, self.driver, self.package, self.version))
        return hashlib.sha1(raw.encode()).hexdigest()[:8]

    def describe(self) -> str:
        drv = f", driver {self.driver}" if self.driver and self.driver != "-" else ""
        return f"{self.gpu}{drv}, {self.package} {self.version}"

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "driver": self.driver, "package": self.package,
                "version": self.version, "key": self.key}


def identity(host: Host, facts: Facts | None) -> Identity:
    labels = host.labels_dict
    gpu = ""
    if facts is not None and facts.gpus:
        names = sorted({f"{g.get('name')} ({g.get('sm') or g.get('compute_cap') or '?'})"
                        for g in facts.gpus})
        gpu = ", ".join(names) + (f" x{len(facts.gpus)}" if len(facts.gpus) > 1 else "")
    # an explicit label wins: it is how an inventory names a GPU that facts cannot see
    if labels.get("gpu") or labels.get("arch"):
        gpu = " ".join(x for x in (labels.get("gpu"), labels.get("arch")) if x)
    inst = facts.install if facts is not None else None
    return Identity(gpu=gpu or "no GPU", driver=(facts.driver if facts else None) or "-",
                    package=(inst or {}).get("name") or host.package,
                    version=str((inst or {}).get("version") or "?"))


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
    for h, f in zip(hosts, facts):
        ident = identity(h, f)
        g = by_key.get(ident.key) if parallel else None
        if g is None:
            g = HostGroup(ident, key=ident.key if parallel else f"{ident.key}-{h.name}")
            groups.append(g)
            if parallel:
                by_key[ident.key] = g
        g.hosts.append(h)
    return groups
