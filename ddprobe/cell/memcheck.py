"""Parse compute-sanitizer (memcheck) reports into typed findings.

Real output (captured on an H200, see tests/data/compute-sanitizer-*.txt):

========= Invalid __global__ write of size 1 bytes
=========     at write_mask+0x1f0 in gpu_overrun.py:17
=========     by thread (96,0,0) in block (288,0,0)
=========     Access to 0x7fce36848300 is out of bounds
=========     and is 121 bytes after the nearest allocation at 0x7fce36800000 of size 295,560 bytes
...
========= ERROR SUMMARY: 49 errors

Under PyTorch's caching allocator an overrun stays inside one cudaMalloc'ed segment and memcheck
sees nothing ("ERROR SUMMARY: 0 errors"): run with PYTORCH_NO_CUDA_MEMORY_CACHING=1 so that the
"nearest allocation" is the undersized buffer itself, and its size names it.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

_PREFIX = re.compile(r"^=+\s?")
_HEAD = re.compile(r"Invalid (?P<space>__\w+__|\w+) (?P<access>read|write|atomic\w*) of size "
                   r"(?P<size>\d{1,20}) bytes?")
_AT = re.compile(r"^\s*at (?P<kernel>[^\s+]+)(?:\+(?P<offset>0x[0-9a-f]+))?(?: in (?P<loc>\S+))?")
_THREAD = re.compile(r"by thread \((?P<t>[\d,]+)\) in block \((?P<b>[\d,]+)\)")
_ADDR = re.compile(r"Access to (?P<addr>0x[0-9a-f]+) is out of bounds")
_NEAR = re.compile(r"and is (?P<dist>[\d,]{1,30}) bytes? (?P<where>after|before) the nearest "
                   r"allocation at (?P<base>0x[0-9a-f]+) of size (?P<size>[\d,]{1,30}) bytes?")
_SUMMARY = re.compile(r"ERROR SUMMARY: (?P<n>[\d,]{1,30}) errors?")
_OTHER = re.compile(r"(Program hit|Invalid|Malloc|Leaked|Race|Uninitialized) ")


# numbers are bounded in the patterns: a longer one (host text) is not a match, never an int()
# of thousands of digits (a ValueError)
def _int(s: str) -> int:
    digits = s.replace(",", "")
    return int(digits) if digits else 0


@dataclass
class SanitizerFinding:
    access: str  # read | write | atomic...
    space: str  # __global__, __shared__, ...
    size: int  # bytes per access
    kernel: str
    location: str | None = None  # file:line of the kernel source when known
    address: str | None = None
    thread: str | None = None
    block: str | None = None
    distance: int | None = None  # bytes after/before the nearest allocation
    direction: str | None = None  # after | before
    allocation_base: str | None = None
    allocation_size: int | None = None  # bytes: the undersized buffer's size
    count: int = 1  # identical findings folded together (same kernel, access, allocation)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def summary(self) -> str:
        s = f"{self.kernel}: invalid {self.space} {self.access} of {self.size} B"
        if self.allocation_size is not None:
            s += (f", {self.distance} B {self.direction} an allocation of "
                  f"{self.allocation_size:,} B")
        return s + (f" (x{self.count})" if self.count > 1 else "")


@dataclass
class SanitizerReport:
    findings: list[SanitizerFinding] = field(default_factory=list)
    error_count: int | None = None  # from ERROR SUMMARY
    other_errors: list[str] = field(default_factory=list)  # lines not parsed into findings
    ran: bool = False  # a COMPUTE-SANITIZER banner was seen

    @property
    def clean(self) -> bool:
        return self.ran and not self.findings and not self.error_count

    def to_dict(self) -> dict[str, Any]:
        return {"findings": [f.to_dict() for f in self.findings], "error_count": self.error_count,
                "other_errors": self.other_errors, "ran": self.ran, "clean": self.clean}


def parse_memcheck(text: str) -> SanitizerReport:
    rep = SanitizerReport()
    cur: SanitizerFinding | None = None
    folded: dict[tuple[Any, ...], SanitizerFinding] = {}

    def close() -> None:
        nonlocal cur
        if cur is None:
            return
        key = (cur.kernel, cur.access, cur.space, cur.size, cur.allocation_base,
               cur.allocation_size, cur.direction)
        if key in folded:
            prev = folded[key]
            prev.count += 1
            if cur.distance is not None and prev.distance is not None and \
                    cur.distance < prev.distance:
                prev.distance, prev.address = cur.distance, cur.address  # keep the first byte
        else:
            folded[key] = cur
            rep.findings.append(cur)
        cur = None

    for raw in text.splitlines():
        if "COMPUTE-SANITIZER" in raw:
            rep.ran = True
        if not raw.startswith("="):
            continue
        line = _PREFIX.sub("", raw)
        if m := _SUMMARY.search(line):
            close()
            n = _int(m.group("n"))
            rep.error_count = n if rep.error_count is None else max(rep.error_count, n)
            continue
        if m := _HEAD.search(line):
            close()
            cur = SanitizerFinding(access=m.group("access"), space=m.group("space"),
                                   size=int(m.group("size")), kernel="?")
            continue
        if cur is None:
            if _OTHER.match(line.strip()):
                rep.other_errors.append(line.strip())
            continue
        if cur.kernel == "?" and (m := _AT.match(line)):
            cur.kernel, cur.location = m.group("kernel"), m.group("loc")
        elif m := _THREAD.search(line):
            cur.thread, cur.block = m.group("t"), m.group("b")
        elif m := _ADDR.search(line):
            cur.address = m.group("addr")
        elif m := _NEAR.search(line):
            cur.distance = _int(m.group("dist"))
            cur.direction = m.group("where")
            cur.allocation_base = m.group("base")
            cur.allocation_size = _int(m.group("size"))
    close()
    return rep


def match_buffer(finding: SanitizerFinding, buffers: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Name the buffer: the grep-buffers row whose evaluated size (bytes, for the running config)
    equals the sanitizer's "nearest allocation" size. Rows: {"attr", "file", "line", "bytes"}."""
    if finding.allocation_size is None:
        return None
    exact = [b for b in buffers if b.get("bytes") == finding.allocation_size]
    return exact[0] if len(exact) == 1 else (exact[0] if exact else None)
