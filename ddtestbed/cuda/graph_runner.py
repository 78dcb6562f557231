"""CUDA-graph capture and replay of the verify step with `torch.cuda.CUDAGraph`.

`CudaGraphRunner.__init__` (the CPU mode's, inherited unchanged) allocates the backend's graph
state, the static `input_ids` / `seq_lens`, captures every batch size and, for multi-wave trees,
re-allocates the backend's state *after* capture (defect (b)). Here a capture is a real one: the
kernels of the verify step are recorded with the device pointers of the buffers bound at that
moment, so a graph captured before the re-allocation keeps reading the old buffers while
replay writes the new ones.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..srt.model_executor.cuda_graph_runner import CapturedGraph, CudaGraphRunner
from ..srt.model_executor.forward_batch_info import ForwardBatch
from . import forward as F
from .reference import VisibleRow, static_rows

if TYPE_CHECKING:
    from .model_runner import CudaModelRunner


@dataclass
class CudaCapturedGraph(CapturedGraph):
    graph: Any = None  # device.CapturedGraph


class CudaGraphRunnerCuda(CudaGraphRunner):
    model_runner: CudaModelRunner

    def capture(self) -> None:
        runner = self.model_runner
        dev = runner.device
        backend = runner.attn_backend
        ndt = self.num_tokens_per_bs
        width = backend.kernel.row_width(ndt)
        # Where the captured verify kernel reads each request's rows: the static layout with
        # the kernel's own row pitch (fixed per graph, so they are static buffers too).
        base, stride = static_rows(backend.cuda_graph_max_bs, backend.max_context_len, width,
                                   self.max_bs)
        self.read_base = dev.tensor(base, torch.int64)
        self.read_stride = dev.tensor(stride, torch.int64)
        self.out = F.VerifyOut.alloc(self.max_bs * ndt, ndt, backend.max_context_len,
                                     dev.torch_device)
        super().capture()

    def capture_one_batch_size(self, bs: int) -> CapturedGraph:
        runner = self.model_runner
        num_tokens = bs * self.num_tokens_per_bs
        runner.verify_gemms(num_tokens, capturing=True)
        runner.clock.startup_sleep(runner.scenario.timing.capture_per_bs_s, "capture")
        metadata = runner.attn_backend.init_forward_metadata_capture_cuda_graph(bs)
        backend = runner.attn_backend
        ndt = self.num_tokens_per_bs
        scale = runner.capture_logit_scale(ndt, bs)  # baked into this graph (defect g)
        input_ids = self.input_ids
        kv_tokens = runner.token_to_kv_pool.gpu_tokens
        kv_indptr = backend.kv_indptr

        def step() -> None:
            runner.layers.launch(self.out.hidden, input_ids, num_tokens)
            F.launch_verify(mask=metadata.custom_mask, base=self.read_base,
                            stride=self.read_stride, seq_lens=self.seq_lens,
                            kv_indptr=kv_indptr, kv_indices=metadata.kv_indices,
                            kv_tokens=kv_tokens, input_ids=input_ids, out=self.out, bs=bs,
                            ndt=ndt, logit_scale=scale)

        graph = runner.device.capture(step)
        return CudaCapturedGraph(bs=bs, metadata=metadata, input_ids=input_ids, graph=graph)

    def replay(self, forward_batch: ForwardBatch) -> tuple[int, list[list[VisibleRow]]]:
        runner = self.model_runner
        raw_bs = forward_batch.batch_size
        bs = self.capture_bs[bisect.bisect_left(self.capture_bs, raw_bs)]
        backend = runner.attn_backend
        # replay_prepare: copy inputs into the static buffers; padding slots get seq_len 0
        F.write_ids(self.seq_lens, list(forward_batch.seq_lens) + [0] * (bs - raw_bs))
        backend.write_input_ids(self.input_ids, forward_batch)
        backend.init_forward_metadata_replay_cuda_graph(forward_batch)
        graph = self.graphs[bs]
        assert isinstance(graph, CudaCapturedGraph)
        graph.graph.replay()
        runner.launched()
        rows = F.read_rows(self.out, forward_batch.seq_lens, self.num_tokens_per_bs,
                           runner.prefixes(forward_batch))
        runner.verify_logit_scale = F.used_scale(self.out)  # what the replayed kernel used
        return bs, rows
