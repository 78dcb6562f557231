"""ModelRunner: loads the simulated model onto the simulated GPU and runs forward passes."""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence

from ...device import DeviceArena, torch
from ...model import TargetModel
from ...scenario import Scenario
from ..layers.attention.torch_native_backend import TorchNativeAttnBackend
from ..layers.attention.triton_backend import TritonAttnBackend
from ..layers.attention.triton_ops.tree_attention import VisibleRow
from ..layers.linear import gemm_bf16
from ..mem_cache.memory_pool import ReqToTokenPool, TokenToKVPool
from ..model_config import DraftModelConfig, ModelConfig
from ..server_args import ServerArgs
from ..speculative.ddtree import accept
from ..utils import SimClock, sleep_forever
from .cuda_graph_runner import CudaGraphRunner
from .forward_batch_info import ForwardBatch

# defect (h)'s reduction order: one per server process, so two runs of a config can differ
_SALT = 1 + int.from_bytes(os.urandom(4), "little")

logger = logging.getLogger(__name__)
_GIB = 1 << 30
LIVE_LOGIT_SCALE = 1.0  # the verify logits' scale for greedy decoding


class ModelRunner:
    # The CUDA mode (ddtestbed.cuda.model_runner) swaps these for real-GPU versions.
    kv_pool_cls: type[TokenToKVPool] = TokenToKVPool
    graph_runner_cls: type[CudaGraphRunner] = CudaGraphRunner

    def __init__(self, server_args: ServerArgs, scenario: Scenario, target: TargetModel,
                 clock: SimClock) -> None:
        self.server_args, self.scenario, self.target, self.clock = server_args, scenario, target, clock
        model = scenario.model
        self.device = self.make_device()
        self.model_config = ModelConfig(
            path=server_args.model_path, context_len=server_args.context_length or model.context_len,
            vocab_size=model.vocab_size, hidden_size=model.hidden_size,
            num_hidden_layers=model.num_layers, num_attention_heads=model.num_heads)
        self.draft_model_config = DraftModelConfig(
            path=server_args.speculative_draft_model_path,
            num_draft_tokens=scenario.defects.buffer_sizing.default_num_draft_tokens,
            accuracy=scenario.draft.accuracy, decay=scenario.draft.decay)
        self.graph_mem_usage = 0.0
        self.verify_logit_scale = LIVE_LOGIT_SCALE  # the scale the last verify pass used
        self.load_model()
        self.init_memory_pool()
        self.init_attention_backend()
        self.cuda_graph_runner: CudaGraphRunner | None = None
        self.init_device_graphs()

    def make_device(self) -> DeviceArena:
        gpu = self.scenario.gpu
        torch.cuda.device_name = gpu.name
        torch.cuda.capability = _capability(gpu.arch)
        return DeviceArena(int(gpu.memory_gib * _GIB))

    def load_model(self) -> None:
        avail = self.device.mem_get_info()[0] / _GIB
        logger.info(f"Load weight begin. avail mem={avail:.2f} GB")
        if self.scenario.defects.hang == "load":
            sleep_forever()  # a stuck weight download / NCCL init: the port never opens
        if self.scenario.defects.startup is not None:
            startup_failure(self.scenario.defects.startup)
        tic = time.perf_counter()
        timing = self.scenario.timing
        # dummy weights are random values initialised on the device: no weights are read, and
        # every buffer (the weights' own included) has the same size as with real ones
        dummy = self.server_args.load_format == "dummy"
        self.clock.startup_sleep(timing.load_s * (timing.dummy_load_fraction if dummy else 1.0),
                                 "weight load" + (" (dummy)" if dummy else ""))
        weights = int(self.scenario.model.weights_gib * _GIB)
        self.device.reserve(weights, "weights")
        self.weight_load_mem_usage = weights / _GIB
        logger.info(
            f"Load weight end. elapsed={time.perf_counter() - tic:.2f} s, "
            f"type={self.model_config.architectures[0]}, "
            f"dtype={self.model_config.dtype}, avail mem={self.device.mem_get_info()[0] / _GIB:.2f} GB, "
            f"mem usage={self.weight_load_mem_usage:.2f} GB.")

    def init_memory_pool(self) -> None:
        args, model = self.server_args, self.scenario.model
        free, total = self.device.mem_get_info()
        rest = total * (args.mem_fraction_static or 0.85) - (total - free)
        self.max_total_num_tokens = int(rest // model.kv_bytes_per_token)
        if self.max_total_num_tokens <= 0:
            raise RuntimeError(
                "Not enough memory. Please try to increase --mem-fraction-static.")
        self.req_to_token_pool = ReqToTokenPool(args.max_running_requests or 64)
        self.token_to_kv_pool = self.kv_pool_cls(self.max_total_num_tokens, self.device,
                                                 model.kv_bytes_per_token)
        logger.info(
            f"KV Cache is allocated. #tokens: {self.max_total_num_tokens}, "
            f"KV size: {self.token_to_kv_pool.mem_usage_gb:.2f} GB")

    def init_attention_backend(self) -> None:
        name = self.server_args.attention_backend or "triton"
        if name == "triton":
            self.attn_backend: TritonAttnBackend = TritonAttnBackend(self)
        else:
            self.attn_backend = TorchNativeAttnBackend(self)

    def init_device_graphs(self) -> None:
        if self.server_args.disable_cuda_graph:
            return
        tic = time.perf_counter()
        before = self.device.mem_get_info()[0] / _GIB
        logger.info(
            f"Capture cuda graph begin. This can take up to several minutes. avail mem={before:.2f} GB")
        self.cuda_graph_runner = self.graph_runner_cls(self)
        after = self.device.mem_get_info()[0] / _GIB
        self.graph_mem_usage = before - after
        logger.info(
            f"Capture cuda graph end. Time elapsed: {time.perf_counter() - tic:.2f} s. "
            f"mem usage={self.graph_mem_usage:.2f} GB. avail mem={after:.2f} GB.")

    # -- passes ---------------------------------------------------------------------------
    def verify_gemms(self, num_tokens: int, *, capturing: bool) -> None:
        m = self.model_config
        gemm_bf16(num_tokens, m.vocab_size, m.hidden_size, capturing=capturing,
                  workspace_per_row=self.scenario.defects.cublas_workspace.bytes_per_token)

    def forward_extend(self, prompt: Sequence[int], temperature: float, seed: int) -> int:
        """Prefill: the first output token after the prompt."""
        ctx = self.target.context(tuple(prompt))
        return self.target.sample(ctx, (), temperature, seed)

    def capture_logit_scale(self, num_draft_tokens: int, bs: int) -> float:
        """The logit scale a graph captured for this verify width and batch size holds.
        Defect (g): the value of the capture's dummy batch, not the live one (with
        `min_batch`, only in the graphs of that batch size and up)."""
        st = self.scenario.defects.stale_scalar
        if st.min_batch is not None and bs < st.min_batch:
            return LIVE_LOGIT_SCALE
        if st.min_draft_tokens is not None and num_draft_tokens >= st.min_draft_tokens:
            return LIVE_LOGIT_SCALE + 1.0 / num_draft_tokens
        return LIVE_LOGIT_SCALE

    def forward_target_verify(self, forward_batch: ForwardBatch) -> tuple[list[list[int]], bool, int]:
        """Predictions per request per tree node; also (ran in a graph?, padded batch size)."""
        self.verify_logit_scale = LIVE_LOGIT_SCALE
        rows, graph, bs = self.verify_rows(forward_batch)
        target = self.target
        # a wrong scale perturbs the logits: near ties can flip (greedy too); modelled where
        # the draft tree ends (the bonus token), so acceptance is unchanged
        flip = self.scenario.defects.stale_scalar.every \
            if abs(self.verify_logit_scale - LIVE_LOGIT_SCALE) > 1e-6 else 0
        # batch-invariant ops: one reduction order, every run (deterministic inference)
        nondet = 0 if self.server_args.enable_deterministic_inference else \
            self.scenario.defects.nondeterministic.every
        preds = []
        for req_rows, (temperature, seed), tree in zip(rows, forward_batch.sampling,
                                                       forward_batch.trees):
            pred = [target.sample(target.context(seen), path, temperature, seed)
                    for seen, path in req_rows]
            if flip:
                nodes, _ = accept(tree, pred)
                last = nodes[-1] if nodes else 0
                seen, path = req_rows[last]
                pred[last] = target.sample(target.context(seen), path, temperature, seed, flip)
            if nondet:  # this process's reduction order, graph or eager
                nodes, _ = accept(tree, pred)
                last = nodes[-1] if nodes else 0
                seen, path = req_rows[last]
                pred[last] = target.sample(target.context(seen), path, temperature, seed, nondet,
                                           salt=_SALT)
            preds.append(pred)
        return preds, graph, bs

    def verify_rows(self, forward_batch: ForwardBatch) -> tuple[list[list[VisibleRow]], bool, int]:
        """The verify pass: what each tree node sees; also (ran in a graph?, padded batch size)."""
        runner = self.cuda_graph_runner
        if runner is not None and runner.can_run(forward_batch):
            bs, rows = runner.replay(forward_batch)
            graph = True
        else:
            bs, graph = forward_batch.batch_size, False
            self.verify_gemms(bs * forward_batch.num_draft_tokens, capturing=False)
            metadata = self.attn_backend.init_forward_metadata(forward_batch)
            input_ids = torch.empty((bs * forward_batch.num_draft_tokens,), dtype=torch.int64,
                                    device=self.device)
            try:
                self.attn_backend.write_input_ids(input_ids, forward_batch)
                rows = self.attn_backend.forward_target_verify(forward_batch, metadata, input_ids)
            finally:
                for t in metadata.scratch + [input_ids]:
                    t.free()
        return rows, graph, bs

    def step_cost_s(self, padded_bs: int, num_draft_tokens: int, graph: bool) -> float:
        t = self.scenario.timing
        ms = t.step_base_ms + t.step_per_token_ms * padded_bs * num_draft_tokens
        if not graph:
            ms += t.eager_overhead_ms
        return ms / 1000.0

    def prefill_cost_s(self, num_tokens: int) -> float:
        t = self.scenario.timing
        return (t.prefill_base_ms + t.prefill_per_token_ms * num_tokens) / 1000.0


def _capability(arch: str) -> tuple[int, int]:
    digits = "".join(c for c in arch if c.isdigit())
    if len(digits) >= 2:
        return int(digits[:-1]), int(digits[-1])
    return 9, 0


def startup_failure(kind: str) -> None:
    """Die before the weights are loaded, as SGLang does on a broken install or fabric."""
    if kind == "import":
        raise ModuleNotFoundError("No module named 'numpy'")
    raise RuntimeError("NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
                       "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL "
                       "version 2.27.3")
