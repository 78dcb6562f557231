"""The real GPU behind the CUDA mode: tensor factories, accounting, graph capture, timing.

The model code allocates through the testbed's `torch` stand-in (`ddtestbed.device.torch`);
given this device instead of the simulated arena, the stand-in calls the factories here, so the
very same allocation lines (`init_cuda_graph_state` and friends) make real device tensors.

Weights and the KV cache of the scenario's model are *accounted* (never allocated): the
server's logs and memory reports keep SGLang's shape without filling the card.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from ..device import DType

_GIB = 1 << 30


def torch_dtype(dtype: DType | torch.dtype) -> torch.dtype:
    """The real dtype for the stand-in's dtype (`torch.uint8` -> torch.uint8)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    return getattr(torch, dtype.name.rsplit(".", 1)[-1])


def arch_of(index: int = 0) -> str:
    major, minor = torch.cuda.get_device_capability(index)
    return f"sm_{major}{minor}"


class CapturedGraph:
    """A captured CUDA graph and what it needs to stay valid (its pool, its stream)."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph

    def replay(self) -> None:
        self.graph.replay()


class CudaDevice:
    """One CUDA device, as the testbed's model code sees it."""

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self.torch_device = torch.device("cuda", index)
        torch.cuda.set_device(self.torch_device)
        self.name = torch.cuda.get_device_name(index)
        self.arch = arch_of(index)
        self.total = torch.cuda.get_device_properties(index).total_memory
        self.reserved = 0  # bytes accounted for weights and KV cache, never allocated
        self._lock = threading.Lock()
        self._pool: Any = None
        self._stream: Any = None

    def __repr__(self) -> str:
        return f"device(type='cuda', index={self.index})"

    # -- the stand-in's factories ---------------------------------------------------------
    def empty(self, shape: tuple[int, ...], dtype: DType | torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=torch_dtype(dtype), device=self.torch_device)

    def zeros(self, shape: tuple[int, ...], dtype: DType | torch.dtype) -> torch.Tensor:
        return torch.zeros(shape, dtype=torch_dtype(dtype), device=self.torch_device)

    def full(self, shape: tuple[int, ...], fill_value: int,
             dtype: DType | torch.dtype) -> torch.Tensor:
        return torch.full(shape, fill_value, dtype=torch_dtype(dtype), device=self.torch_device)

    def arange(self, start: int, end: int, step: int,
               dtype: DType | torch.dtype) -> torch.Tensor:
        return torch.arange(start, end, step, dtype=torch_dtype(dtype), device=self.torch_device)

    def tensor(self, values: Any, dtype: torch.dtype) -> torch.Tensor:
        """Host values -> a new device tensor (one host-to-device copy)."""
        return torch.tensor(values, dtype=dtype).to(self.torch_device, non_blocking=False)

    # -- memory accounting ----------------------------------------------------------------
    def reserve(self, nbytes: int, what: str) -> None:
        with self._lock:
            free = self.mem_get_info()[0]
            if nbytes > free:
                raise torch.cuda.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {nbytes / _GIB:.2f} GiB ({what}). "
                    f"GPU {self.index} has a total capacity of {self.total / _GIB:.2f} GiB of "
                    f"which {free / _GIB:.2f} GiB is free.")
            self.reserved += nbytes

    def mem_get_info(self) -> tuple[int, int]:
        free, total = torch.cuda.mem_get_info(self.index)
        return max(0, free - self.reserved), total

    # -- graphs, streams, time ------------------------------------------------------------
    def capture(self, fn: Callable[[], None]) -> CapturedGraph:
        """Warm `fn` up on the capture stream (compiles kernels), then capture it."""
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.torch_device)
            self._pool = torch.cuda.graph_pool_handle()
        stream = self._stream
        stream.wait_stream(torch.cuda.current_stream(self.torch_device))
        with torch.cuda.stream(stream):
            fn()
        stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, stream=stream):
            fn()
        torch.cuda.current_stream(self.torch_device).wait_stream(stream)
        return CapturedGraph(graph)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.torch_device)

    def timer(self) -> Timer:
        return Timer()


class Timer:
    """GPU time between start() and stop(), read after the stream is synchronised."""

    def __init__(self) -> None:
        self._a = torch.cuda.Event(enable_timing=True)
        self._b = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        self._a.record()

    def stop(self) -> None:
        self._b.record()

    def elapsed_ms(self) -> float:
        return float(self._a.elapsed_time(self._b))
