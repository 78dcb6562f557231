"""ModelRunner of the CUDA mode: the scenario's server on the real GPU.

What changes against the CPU mode: the device (real tensors; the scenario's GPU becomes the
real one, so the scenario's `kernel.arch` defect applies only on that architecture), the KV
token pool mirrored on the GPU, the attention backends' writes and the verify pass (Triton
kernels), graph capture (`torch.cuda.CUDAGraph`), and time: a decode step costs what the GPU
and the host really spend (the scenario's simulated step time is not added). Load and capture
still sleep for the scenario's scaled start-up times.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import torch

from ..model import TargetModel
from ..scenario import Scenario
from ..srt.mem_cache.memory_pool import TokenToKVPool
from ..srt.model_executor.forward_batch_info import ForwardBatch
from ..srt.model_executor.model_runner import LIVE_LOGIT_SCALE, ModelRunner
from ..srt.server_args import ServerArgs
from ..srt.utils import SimClock
from . import forward as F
from .backend import CudaTorchNativeAttnBackend, CudaTritonAttnBackend
from .device import CudaDevice
from .graph_runner import CudaGraphRunnerCuda
from .reference import VisibleRow, ragged_rows

logger = logging.getLogger(__name__)
_GIB = 1 << 30


class CudaTokenToKVPool(TokenToKVPool):
    """The host pool plus `gpu_tokens`, the token held at each KV location, on the device.
    Writes are batched and flushed once before each verify pass."""

    def __init__(self, size: int, device: CudaDevice, bytes_per_token: int) -> None:
        super().__init__(size, device, bytes_per_token)  # type: ignore[arg-type]
        self.gpu_tokens = device.zeros((size,), torch.int32)
        self._pending_locs: list[int] = []
        self._pending_tokens: list[int] = []

    def write(self, locs: Sequence[int], tokens: Sequence[int]) -> None:
        super().write(locs, tokens)
        n = min(len(locs), len(tokens))
        self._pending_locs.extend(locs[:n])
        self._pending_tokens.extend(tokens[:n])

    def flush(self) -> None:
        if not self._pending_locs:
            return
        dev = self.gpu_tokens.device
        # The last write of a location wins, as in the host pool: a request that finished in
        # the last decode step and a new one prefilled into its freed locations are both
        # pending here. index_copy_ with repeated indices picks any of them (nondeterministic
        # on CUDA): seen on the H200 as a request's first decode step reading the previous
        # owner's token, in graph and eager mode alike.
        latest = dict(zip(self._pending_locs, self._pending_tokens))
        idx = torch.tensor(list(latest), dtype=torch.int64).to(dev)
        val = torch.tensor(list(latest.values()), dtype=torch.int32).to(dev)
        self.gpu_tokens.index_copy_(0, idx, val)
        self._pending_locs, self._pending_tokens = [], []


class CudaModelRunner(ModelRunner):
    kv_pool_cls = CudaTokenToKVPool  # type: ignore[assignment]
    graph_runner_cls = CudaGraphRunnerCuda

    def __init__(self, server_args: ServerArgs, scenario: Scenario, target: TargetModel,
                 clock: SimClock) -> None:
        self.cuda = CudaDevice(0)
        gpu = dataclasses.replace(scenario.gpu, name=self.cuda.name, arch=self.cuda.arch,
                                  memory_gib=round(self.cuda.total / _GIB, 2), count=1)
        scenario = dataclasses.replace(scenario, gpu=gpu)
        logger.info(f"CUDA mode on {self.cuda.name} ({self.cuda.arch}), torch {torch.__version__}"
                    f", triton {_triton_version()}")
        self.layers = F.TinyLayers(scenario.model.num_layers, self.cuda.torch_device)
        self.verify_ms = {True: [0.0, 0], False: [0.0, 0]}  # graph? -> [sum ms, passes]
        super().__init__(server_args, scenario, target, clock)

    def make_device(self) -> CudaDevice:  # type: ignore[override]
        return self.cuda

    def init_attention_backend(self) -> None:
        name = self.server_args.attention_backend or "triton"
        cls = CudaTritonAttnBackend if name == "triton" else CudaTorchNativeAttnBackend
        self.attn_backend = cls(self)

    def prefixes(self, forward_batch: ForwardBatch) -> list[tuple[int, ...]]:
        """Each request's own KV tokens (host truth), to check what the kernel gathered."""
        tokens = self.token_to_kv_pool.tokens
        return [tuple(tokens[loc] for loc in locs) for locs in forward_batch.kv_locs]

    def verify_rows(self, forward_batch: ForwardBatch) -> tuple[list[list[VisibleRow]], bool, int]:
        pool = self.token_to_kv_pool
        assert isinstance(pool, CudaTokenToKVPool)
        pool.flush()
        self._timer = timer = self.cuda.timer()
        timer.start()
        runner = self.cuda_graph_runner
        if runner is not None and runner.can_run(forward_batch):
            bs, rows = runner.replay(forward_batch)
            graph = True
        else:
            bs, graph = forward_batch.batch_size, False
            rows = self._eager(forward_batch, pool)
        self._account(graph, timer.elapsed_ms())  # read back already: the stream is idle
        return rows, graph, bs

    def launched(self) -> None:
        """The pass is queued (before the read-back): the end of its timed span."""
        self._timer.stop()

    def _eager(self, fb: ForwardBatch, pool: CudaTokenToKVPool) -> list[list[VisibleRow]]:
        bs, ndt = fb.batch_size, fb.num_draft_tokens
        self.verify_gemms(bs * ndt, capturing=False)
        backend = self.attn_backend
        metadata = backend.init_forward_metadata(fb)
        dev = self.cuda
        input_ids = dev.empty((bs * ndt,), torch.int64)
        backend.write_input_ids(input_ids, fb)
        base, stride = ragged_rows(fb.seq_lens, ndt, backend.kernel.row_width(ndt))
        out = F.VerifyOut.alloc(bs * ndt, ndt, max(fb.seq_lens, default=1), dev.torch_device)
        self.layers.launch(out.hidden, input_ids, bs * ndt)
        F.launch_verify(mask=metadata.custom_mask, base=dev.tensor(base, torch.int64),
                        stride=dev.tensor(stride, torch.int64),
                        seq_lens=dev.tensor(fb.seq_lens, torch.int32),
                        kv_indptr=dev.tensor(fb.kv_indptr(), torch.int32),
                        kv_indices=metadata.kv_indices, kv_tokens=pool.gpu_tokens,
                        input_ids=input_ids, out=out, bs=bs, ndt=ndt,
                        logit_scale=LIVE_LOGIT_SCALE)
        self.launched()
        rows = F.read_rows(out, fb.seq_lens, ndt, self.prefixes(fb))
        self.verify_logit_scale = F.used_scale(out)
        return rows

    def _account(self, graph: bool, ms: float) -> None:
        acc = self.verify_ms[graph]
        acc[0] += ms
        acc[1] += 1
        every = self.server_args.decode_log_interval
        if acc[1] % every == 0:
            logger.info(f"Verify pass on {self.cuda.name}: {acc[0] / acc[1]:.3f} ms mean over "
                        f"{acc[1]} passes, cuda graph: {graph}")

    def step_cost_s(self, padded_bs: int, num_draft_tokens: int, graph: bool) -> float:
        return 0.0  # the step took what it took on the GPU


def _triton_version() -> str:
    try:
        import triton
    except ImportError:
        return "?"
    return str(triton.__version__)
