"""Run the target-verify pass with CUDA graphs: capture per batch size, then replay.

Like SGLang's `CudaGraphRunner`: static input buffers and the attention backend's graph state
are allocated once for the largest batch, each batch size is captured (largest first), and a
replay pads the batch to the next captured size and copies the step's inputs into the static
buffers. A captured graph holds on to the buffers it was captured with, as a real one keeps
their device pointers.
"""
from __future__ import annotations

import bisect
import logging
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, List

from ...device import Tensor, torch
from ..layers.attention.triton_backend import ForwardMetadata
from .forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from .model_runner import ModelRunner

logger = logging.getLogger(__name__)

CUDA_GRAPH_CAPTURE_FAILED_MSG = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)


def get_batch_sizes_to_capture(model_runner: ModelRunner) -> List[int]:
    server_args = model_runner.server_args
    capture_bs = server_args.cuda_graph_bs
    if capture_bs is None:
        capture_bs = [1, 2, 4, 8, 12] + list(range(16, 257, 8))
        capture_bs = [bs for bs in capture_bs if bs <= server_args.cuda_graph_max_bs]
        if server_args.cuda_graph_max_bs not in capture_bs:
            capture_bs.append(server_args.cuda_graph_max_bs)
    num_max_requests = model_runner.req_to_token_pool.size
    if max(capture_bs) > num_max_requests:
        capture_bs = list(capture_bs) + [num_max_requests]
    capture_bs = sorted({bs for bs in capture_bs if bs <= num_max_requests})
    assert len(capture_bs) > 0 and capture_bs[0] > 0, f"{capture_bs=}"
    return capture_bs


@dataclass
class CapturedGraph:
    bs: int
    metadata: ForwardMetadata  # the attention buffers bound at capture time
    input_ids: Tensor
    # The verify pass's logit scale is a host scalar, so a captured graph bakes in the value
    # it had at capture (from the dummy batch); replay must not rely on it being live.
    logit_scale: float = 1.0


class CudaGraphRunner:
    def __init__(self, model_runner: ModelRunner):
        self.model_runner = model_runner
        self.num_tokens_per_bs = model_runner.server_args.speculative_num_draft_tokens or 1
        self.capture_bs = get_batch_sizes_to_capture(model_runner)
        logger.info(f"Capture cuda graph bs {self.capture_bs}")

        # Attention backend
        self.max_bs = max(self.capture_bs)
        self.max_num_token = self.max_bs * self.num_tokens_per_bs
        backend = self.model_runner.attn_backend
        # DDTree trees wider than one kernel wave are verified in several waves.
        self.multi_wave = (backend.max_wave_tokens is not None
                           and self.num_tokens_per_bs > backend.max_wave_tokens)
        if self.multi_wave:
            logger.info(f"Verify width {self.num_tokens_per_bs} exceeds one wave "
                        f"({backend.max_wave_tokens}); using multi-wave attention buffers.")
            self.init_wave_state()
        else:
            backend.init_cuda_graph_state(self.max_bs, self.max_num_token)

        # Static input buffers
        self.input_ids = torch.zeros((self.max_num_token,), dtype=torch.int64,
                                     device=model_runner.device)
        self.seq_lens = torch.zeros((self.max_bs,), dtype=torch.int32, device=model_runner.device)
        self.graphs: dict[int, CapturedGraph] = {}

        # Capture
        try:
            self.capture()
        except RuntimeError as e:
            raise Exception(
                f"Capture cuda graph failed: {e}\n{CUDA_GRAPH_CAPTURE_FAILED_MSG}"
            )

        if self.multi_wave:
            # The wave plan depends on the captured sizes, so the wave state is rebuilt now.
            self.init_wave_state()

    def init_wave_state(self) -> None:
        """Graph state for multi-wave verification, sized for the full verify width."""
        self.model_runner.attn_backend.init_cuda_graph_state(
            self.max_bs, self.max_num_token, num_tokens_per_bs=self.num_tokens_per_bs
        )

    def capture(self) -> None:
        runner = self.model_runner
        total = len(self.capture_bs)
        tic = time.perf_counter()
        # Capture the large shapes first so that the smaller shapes can reuse their memory.
        for i, bs in enumerate(reversed(self.capture_bs)):
            avail_mem = runner.device.mem_get_info()[0] / (1 << 30)
            elapsed = time.perf_counter() - tic
            print(f"Capturing batches (bs={bs} avail_mem={avail_mem:.2f} GB): "
                  f"{100 * i // total:3d}%| | {i}/{total} [{elapsed:05.2f}<?]",
                  file=sys.stderr, flush=True)
            self.graphs[bs] = self.capture_one_batch_size(bs)
        print(f"Capturing batches (bs={self.capture_bs[0]} avail_mem="
              f"{runner.device.mem_get_info()[0] / (1 << 30):.2f} GB): 100%| | {total}/{total} "
              f"[{time.perf_counter() - tic:05.2f}<00:00]", file=sys.stderr, flush=True)

    def capture_one_batch_size(self, bs: int) -> CapturedGraph:
        runner = self.model_runner
        num_tokens = bs * self.num_tokens_per_bs
        # The recorded verify pass: its GEMMs run with the fixed graph workspace.
        runner.verify_gemms(num_tokens, capturing=True)
        runner.clock.startup_sleep(runner.scenario.timing.capture_per_bs_s, f"capture bs {bs}")
        metadata = runner.attn_backend.init_forward_metadata_capture_cuda_graph(bs)
        return CapturedGraph(bs=bs, metadata=metadata, input_ids=self.input_ids,
                             logit_scale=runner.capture_logit_scale(self.num_tokens_per_bs, bs))

    def can_run(self, forward_batch: ForwardBatch) -> bool:
        bs = forward_batch.batch_size
        if self.model_runner.server_args.disable_cuda_graph_padding:
            return bs in self.graphs
        return bs <= self.max_bs

    def replay(self, forward_batch: ForwardBatch) -> tuple[int, list]:
        """Returns (captured batch size used, visible rows per request)."""
        raw_bs = forward_batch.batch_size
        index = bisect.bisect_left(self.capture_bs, raw_bs)
        bs = self.capture_bs[index]
        # replay_prepare: copy inputs into the static buffers
        self.seq_lens.copy_(forward_batch.seq_lens)
        self.model_runner.attn_backend.write_input_ids(self.input_ids, forward_batch)
        self.model_runner.attn_backend.init_forward_metadata_replay_cuda_graph(forward_batch)
        graph = self.graphs[bs]
        rows = self.model_runner.attn_backend.forward_target_verify(
            forward_batch, graph.metadata, graph.input_ids)
        self.model_runner.verify_logit_scale = graph.logit_scale
        return bs, rows
