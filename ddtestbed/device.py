"""A simulated GPU: device memory with a caching allocator, and a tiny `torch` stand-in.

Why simulate memory at all: the planted buffer-sizing defect must behave like the real one.
On a GPU with PyTorch's caching allocator an out-of-bounds kernel write that stays inside the
cudaMalloc'ed segment silently corrupts whatever lives next to the buffer; only a write past
the segment faults with `CUDA error: an illegal memory access was encountered`
(see docs/notes/gpu-notes.md). So:

* tensors are views into *segments*, allocated with PyTorch's rules (small requests share
  2 MiB segments, 1-10 MiB ones share 20 MiB segments, larger ones get their own segment
  rounded up to 2 MiB); segments sit at distinct virtual addresses with unmapped gaps;
* host-side tensor operations are bounds-checked like torch (IndexError);
* kernel-side accesses (`DeviceArena.read` / `DeviceArena.write`) are checked only against
  the mapped segments, like a GPU's MMU.

Segment storage is sparse (64 KiB pages) so a 300 MB static buffer costs nothing until touched.
"""
from __future__ import annotations

import bisect
import threading
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_MIB = 1 << 20
_SMALL_REQUEST = 1 * _MIB  # requests below this share small segments
_SMALL_SEGMENT = 2 * _MIB
_LARGE_SEGMENT = 20 * _MIB
_MIN_LARGE_ALLOC = 10 * _MIB  # requests from here get a segment of their own
_ROUND_LARGE = 2 * _MIB
_ROUND_BLOCK = 512
_PAGE = 1 << 16
_BASE_ADDR = 0x7F3A_0000_0000
_GUARD = 2 * _MIB  # unmapped gap between segments

ILLEGAL_ADDRESS = "CUDA error: an illegal memory access was encountered"
ASYNC_NOTE = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


class AcceleratorError(RuntimeError):
    """Raised for a device fault; prints as `torch.AcceleratorError: ...` like PyTorch >= 2.8."""


class OutOfMemoryError(RuntimeError):
    """Raised when the simulated device memory is exhausted."""


# Tracebacks print the qualified class name; real logs say `torch.AcceleratorError`.
AcceleratorError.__module__ = "torch"
OutOfMemoryError.__module__ = "torch"


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int
    code: str  # array module typecode

    def __repr__(self) -> str:
        return self.name


uint8 = DType("torch.uint8", 1, "B")
int32 = DType("torch.int32", 4, "i")
int64 = DType("torch.int64", 8, "q")
float32 = DType("torch.float32", 4, "f")
bfloat16 = DType("torch.bfloat16", 2, "H")  # storage only; values are never interpreted


@dataclass
class _Block:
    offset: int
    size: int
    free: bool


class Segment:
    """One cudaMalloc'ed range: sparse pages plus the allocator's block list."""

    def __init__(self, addr: int, size: int, pool: str) -> None:
        self.addr, self.size, self.pool = addr, size, pool
        self.blocks: list[_Block] = [_Block(0, size, True)]
        self._pages: dict[int, bytearray] = {}

    @property
    def end(self) -> int:
        return self.addr + self.size

    def read(self, off: int, n: int) -> bytes:
        first, last = off // _PAGE, (off + n - 1) // _PAGE if n else off // _PAGE
        if first == last:
            page = self._pages.get(first)
            start = off - first * _PAGE
            return bytes(page[start:start + n]) if page is not None else bytes(n)
        out = bytearray()
        for p in range(first, last + 1):
            lo = max(off, p * _PAGE) - p * _PAGE
            hi = min(off + n, (p + 1) * _PAGE) - p * _PAGE
            page = self._pages.get(p)
            out += page[lo:hi] if page is not None else bytes(hi - lo)
        return bytes(out)

    def write(self, off: int, data: bytes | bytearray | memoryview) -> None:
        n = len(data)
        pos = 0
        while pos < n:
            p, lo = divmod(off + pos, _PAGE)
            take = min(_PAGE - lo, n - pos)
            page = self._pages.get(p)
            if page is None:
                page = self._pages[p] = bytearray(_PAGE)
            page[lo:lo + take] = data[pos:pos + take]
            pos += take

    def zero(self, off: int, n: int) -> None:
        end = off + n
        p = off // _PAGE
        while p * _PAGE < end:
            lo, hi = max(off, p * _PAGE), min(end, (p + 1) * _PAGE)
            page = self._pages.get(p)
            if page is not None:
                if hi - lo == _PAGE:
                    del self._pages[p]
                else:
                    page[lo - p * _PAGE:hi - p * _PAGE] = bytes(hi - lo)
            p += 1


class DeviceArena:
    """The device's memory: reservations (weights, KV cache) plus allocator-managed segments."""

    def __init__(self, capacity: int, name: str = "cuda:0") -> None:
        self.capacity, self.name = capacity, name
        self.reserved = 0  # bytes reserved outside the allocator (weights, KV pool)
        self.segments: list[Segment] = []
        self._starts: list[int] = []
        self._next_addr = _BASE_ADDR
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"device(type='cuda', index={self.name.rsplit(':', 1)[-1]})"

    @property
    def used(self) -> int:
        return self.reserved + sum(s.size for s in self.segments)

    def mem_get_info(self) -> tuple[int, int]:
        return self.capacity - self.used, self.capacity

    def reserve(self, nbytes: int, what: str) -> None:
        with self._lock:
            self._check_room(nbytes)
            self.reserved += nbytes

    def _check_room(self, nbytes: int) -> None:
        free = self.capacity - self.used
        if nbytes > free:
            gib = 1 << 30
            raise OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {nbytes / gib:.2f} GiB. GPU 0 has a total "
                f"capacity of {self.capacity / gib:.2f} GiB of which {free / gib:.2f} GiB is free.")

    def malloc(self, nbytes: int) -> tuple[Segment, int]:
        size = max(_ROUND_BLOCK, -(-nbytes // _ROUND_BLOCK) * _ROUND_BLOCK)
        if size < _SMALL_REQUEST:
            pool, seg_size = "small", _SMALL_SEGMENT
        elif size < _MIN_LARGE_ALLOC:
            pool, seg_size = "large", _LARGE_SEGMENT
        else:
            pool, seg_size = "huge", -(-size // _ROUND_LARGE) * _ROUND_LARGE
        with self._lock:
            if pool != "huge":
                for seg in self.segments:
                    if seg.pool == pool:
                        off = self._take(seg, size)
                        if off is not None:
                            return seg, off
            self._check_room(seg_size)
            seg = Segment(self._next_addr, seg_size, pool)
            self._next_addr += seg_size + _GUARD
            i = bisect.bisect(self._starts, seg.addr)
            self._starts.insert(i, seg.addr)
            self.segments.insert(i, seg)
            off = self._take(seg, size)
            assert off is not None
            return seg, off

    @staticmethod
    def _take(seg: Segment, size: int) -> int | None:
        for i, b in enumerate(seg.blocks):
            if b.free and b.size >= size:
                if b.size > size:
                    seg.blocks.insert(i + 1, _Block(b.offset + size, b.size - size, True))
                b.size, b.free = size, False
                return b.offset
        return None

    def free(self, seg: Segment, offset: int) -> None:
        with self._lock:
            for i, b in enumerate(seg.blocks):
                if b.offset == offset and not b.free:
                    b.free = True
                    # merge with free neighbours so the space can serve larger requests
                    if i + 1 < len(seg.blocks) and seg.blocks[i + 1].free:
                        b.size += seg.blocks.pop(i + 1).size
                    if i > 0 and seg.blocks[i - 1].free:
                        seg.blocks[i - 1].size += seg.blocks.pop(i).size
                    return

    def _segment(self, addr: int, n: int) -> Segment:
        i = bisect.bisect(self._starts, addr) - 1
        if i >= 0:
            seg = self.segments[i]
            if seg.addr <= addr and addr + n <= seg.end:
                return seg
        raise AcceleratorError(ILLEGAL_ADDRESS + "\n" + ASYNC_NOTE)

    # Kernel-side access: only the mapping is checked, never the tensor's own bounds.
    def read(self, addr: int, n: int) -> bytes:
        seg = self._segment(addr, n)
        return seg.read(addr - seg.addr, n)

    def write(self, addr: int, data: bytes | bytearray) -> None:
        seg = self._segment(addr, len(data))
        seg.write(addr - seg.addr, data)


class Tensor:
    """A 1-D (flattened) device tensor: a view into a segment."""

    __slots__ = ("device", "seg", "offset", "shape", "dtype", "numel", "_freed")

    def __init__(self, device: DeviceArena, shape: tuple[int, ...], dtype: DType) -> None:
        numel = 1
        for d in shape:
            numel *= int(d)
        if numel < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {numel}")
        self.device, self.shape, self.dtype, self.numel = device, shape, dtype, numel
        self.seg, self.offset = device.malloc(numel * dtype.itemsize)
        self._freed = False

    def __repr__(self) -> str:
        return f"Tensor(shape={self.shape}, dtype={self.dtype}, ptr={self.data_ptr():#x})"

    def __len__(self) -> int:
        return self.numel

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def data_ptr(self) -> int:
        return self.seg.addr + self.offset

    def _check(self, start: int, count: int) -> None:
        if start < 0 or count < 0 or start + count > self.numel:
            raise IndexError(f"index {start + count - 1} is out of bounds for dimension 0 "
                             f"with size {self.numel}")

    def tolist(self, start: int = 0, stop: int | None = None) -> list[int]:
        stop = self.numel if stop is None else stop
        self._check(start, stop - start)
        size = self.dtype.itemsize
        raw = self.seg.read(self.offset + start * size, (stop - start) * size)
        return array(self.dtype.code, raw).tolist()

    def copy_(self, values: Iterable[int] | bytes, start: int = 0) -> None:
        data = values if isinstance(values, bytes) else array(self.dtype.code, values).tobytes()
        count = len(data) // self.dtype.itemsize
        self._check(start, count)
        self.seg.write(self.offset + start * self.dtype.itemsize, data)

    def fill_(self, value: int) -> Tensor:
        if value == 0:
            self.seg.zero(self.offset, self.nbytes)
        else:
            self.seg.write(self.offset, array(self.dtype.code, [value]).tobytes() * self.numel)
        return self

    def free(self) -> None:
        if not self._freed:
            self._freed = True
            self.device.free(self.seg, self.offset)


def _shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, int) else tuple(int(d) for d in shape)


class _Cuda:
    """`torch.cuda` pieces the runtime uses."""

    def __init__(self) -> None:
        self.device_name = "NVIDIA GPU"
        self.capability = (9, 0)

    def get_device_name(self, device: object = None) -> str:
        return self.device_name

    def get_device_capability(self, device: object = None) -> tuple[int, int]:
        return self.capability

    def synchronize(self, device: object = None) -> None:
        return None


class _Torch:
    """The subset of the torch namespace the testbed's model code uses."""

    uint8, int32, int64, float32, bfloat16 = uint8, int32, int64, float32, bfloat16
    AcceleratorError = AcceleratorError
    OutOfMemoryError = OutOfMemoryError
    Tensor = Tensor

    def __init__(self) -> None:
        self.cuda = _Cuda()

    # A device that is not the simulated arena (the CUDA mode's `CudaDevice`) makes real
    # tensors itself: the model code's allocation lines stay the same in both modes.
    @staticmethod
    def empty(shape: int | Sequence[int], dtype: DType = float32, *,
              device: DeviceArena) -> Tensor:
        if not isinstance(device, DeviceArena):
            return device.empty(_shape(shape), dtype)
        return Tensor(device, _shape(shape), dtype)  # contents: whatever was there before

    @staticmethod
    def zeros(shape: int | Sequence[int], dtype: DType = float32, *,
              device: DeviceArena) -> Tensor:
        if not isinstance(device, DeviceArena):
            return device.zeros(_shape(shape), dtype)
        return Tensor(device, _shape(shape), dtype).fill_(0)

    @staticmethod
    def full(shape: int | Sequence[int], fill_value: int, dtype: DType = float32, *,
             device: DeviceArena) -> Tensor:
        if not isinstance(device, DeviceArena):
            return device.full(_shape(shape), fill_value, dtype)
        return Tensor(device, _shape(shape), dtype).fill_(fill_value)

    @staticmethod
    def arange(start: int, end: int, step: int = 1, dtype: DType = int64, *,
               device: DeviceArena) -> Tensor:
        if not isinstance(device, DeviceArena):
            return device.arange(start, end, step, dtype)
        values = list(range(start, end, step))
        t = Tensor(device, (len(values),), dtype)
        t.copy_(values)
        return t


torch = _Torch()
