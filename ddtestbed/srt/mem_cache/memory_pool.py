"""Request slots and the token KV pool.

The KV pool stores, per location, the token whose key/value live there: attention gathers the
prefix through KV indices, so a wrong index reads a wrong token (or faults when out of range).
Its device memory is reserved in the arena; the token ids are mirrored host-side for speed.
"""
from __future__ import annotations

from array import array
from collections.abc import Sequence

from ...device import ASYNC_NOTE, ILLEGAL_ADDRESS, AcceleratorError, DeviceArena


class ReqToTokenPool:
    def __init__(self, size: int) -> None:
        self.size = size
        self._free = list(range(size - 1, -1, -1))

    def alloc(self) -> int | None:
        return self._free.pop() if self._free else None

    def free(self, slot: int) -> None:
        self._free.append(slot)

    def available_size(self) -> int:
        return len(self._free)


class TokenToKVPool:
    def __init__(self, size: int, device: DeviceArena, bytes_per_token: int) -> None:
        device.reserve(size * bytes_per_token, "kv cache")
        self.size, self.bytes_per_token = size, bytes_per_token
        self.tokens = array("i", bytes(4 * size))
        self._next = 1  # location 0 is the padding slot, as in SGLang
        self._freed: list[int] = []

    @property
    def mem_usage_gb(self) -> float:
        return self.size * self.bytes_per_token / (1 << 30)

    def available_size(self) -> int:
        return len(self._freed) + self.size - self._next

    def used(self) -> int:
        return self.size - 1 - self.available_size()

    def alloc(self, n: int) -> list[int] | None:
        if n > self.available_size():
            return None
        take = min(n, len(self._freed))
        locs = self._freed[len(self._freed) - take:]
        del self._freed[len(self._freed) - take:]
        rest = n - take
        locs.extend(range(self._next, self._next + rest))
        self._next += rest
        return locs

    def free(self, locs: Sequence[int]) -> None:
        self._freed.extend(locs)

    def write(self, locs: Sequence[int], tokens: Sequence[int]) -> None:
        for loc, tok in zip(locs, tokens):
            self.tokens[loc] = tok

    def gather(self, locs: Sequence[int]) -> list[int]:
        """Kernel-side gather: an index outside the pool is a device fault."""
        if len(locs) and (min(locs) < 0 or max(locs) >= self.size):
            raise AcceleratorError(ILLEGAL_ADDRESS + "\n" + ASYNC_NOTE)
        tokens = self.tokens
        return [tokens[loc] for loc in locs]
