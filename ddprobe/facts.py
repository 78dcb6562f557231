"""Host facts: OS, CPUs, memory, GPUs, CUDA, the interpreter, the install, packages, the server.

Gathered in ONE round trip by the host program `hostside/facts.py` (through `hostside.client`),
run with the host's interpreter; the package of interest is found with importlib WITHOUT
importing it. The answer is host text: validated here into `Facts` (types checked, strings
cleaned and capped, lists and maps capped); a field of the wrong type is a RemoteError naming
it, never a guess.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ddprobe.errors import RemoteError
from ddprobe.hostside.client import call
from ddprobe.inventory import Host
from ddprobe.remote import Remote
from ddprobe.untrusted import clean, first_chars

UNKNOWN_NAME_CAP = 40  # characters of an unknown field's name an error shows
NAME_CAP = 100  # characters of a field or package name kept from the answer

MAX_TEXT = 4096  # one string of the answer (a path can be long)
MAX_ITEMS = 64  # GPUs, packages, keys of a nested record

@dataclass
class Facts:
    host: str
    hostname: str = ""
    os: str = ""
    kernel: str = ""
    arch: str = ""
    cpus: int | None = None
    memory_mib: int | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    driver: str | None = None
    cuda: str | None = None
    nvcc: str | None = None
    compute_sanitizer: str | None = None
    python: dict[str, Any] = field(default_factory=dict)
    install: dict[str, Any] | None = None  # {"name", "version", "path"} of host.package
    packages: dict[str, str] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)

    @property
    def sglang(self) -> dict[str, Any] | None:
        return self.install

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sglang"] = self.install if self.install and self.install["name"] == "sglang" else (
            {"version": self.packages.get("sglang"), "path": None}
            if "sglang" in self.packages else None)
        return d


def gather_facts(r: Remote, host: Host) -> Facts:
    s = host.server
    d = call(r, "facts", {"package": host.package, "port": s.port, "bind": s.bind},
             program="facts")
    return facts_from_answer(host.name, d)


class _Bad(ValueError):
    pass


def _text(v: Any, where: str, *, optional: bool = False) -> str | None:
    if v is None and optional:
        return None
    if not isinstance(v, str):
        raise _Bad(f"{where} is {type(v).__name__}, not text")
    return clean(v)[:MAX_TEXT]


def _int(v: Any, where: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _Bad(f"{where} is {type(v).__name__}, not a whole number")
    return v


def _scalar(v: Any, where: str) -> Any:
    """A leaf of a nested record: text (cleaned, capped), a number, a bool or null."""
    if v is None or isinstance(v, (bool, int, float)):
        return v
    return _text(v, where)


def _record(v: Any, where: str, *, optional: bool = False) -> dict[str, Any] | None:
    """A flat record of scalars (a GPU, the interpreter, the install, the server)."""
    if v is None and optional:
        return None
    if not isinstance(v, dict) or len(v) > MAX_ITEMS:
        raise _Bad(f"{where} is not a record of at most {MAX_ITEMS} fields")
    return {first_chars(clean(str(k)), NAME_CAP): _scalar(x, f"{where}.{k}") for k, x in v.items()}


_TEXT_FIELDS = ("hostname", "os", "kernel", "arch")
_OPTIONAL_TEXT = ("driver", "cuda", "nvcc", "compute_sanitizer")


def facts_from_answer(host: str, d: dict[str, Any]) -> Facts:
    """The facts program's answer as a `Facts`; RemoteError for a field of the wrong type."""
    known = {f.name for f in fields(Facts)} - {"host"}
    try:
        unknown = sorted(set(d) - known)
        if unknown:
            shown = ", ".join(first_chars(clean(k), UNKNOWN_NAME_CAP) for k in unknown[:5])
            raise _Bad(f"unknown field(s) {shown}")
        out: dict[str, Any] = {}
        for k in _TEXT_FIELDS:
            if k in d:
                out[k] = _text(d[k], k)
        for k in _OPTIONAL_TEXT:
            if k in d:
                out[k] = _text(d[k], k, optional=True)
        for k in ("cpus", "memory_mib"):
            if k in d:
                out[k] = _int(d[k], k)
        gpus = d.get("gpus", [])
        if not isinstance(gpus, list) or len(gpus) > MAX_ITEMS:
            raise _Bad(f"gpus is not a list of at most {MAX_ITEMS}")
        out["gpus"] = [_record(g, f"gpus[{i}]") for i, g in enumerate(gpus)]
        for k in ("python", "server"):
            if k in d:
                out[k] = _record(d[k], k)
        if "install" in d:
            out["install"] = _record(d["install"], "install", optional=True)
        pk = d.get("packages", {})
        if not isinstance(pk, dict) or len(pk) > MAX_ITEMS:
            raise _Bad(f"packages is not a map of at most {MAX_ITEMS}")
        out["packages"] = {first_chars(clean(str(n)), NAME_CAP): _text(v, f"packages.{n}")
                           for n, v in pk.items()}
    except _Bad as e:
        raise RemoteError(f"{host}: the facts program's answer is malformed: {e}") from None
    return Facts(host=host, **out)
