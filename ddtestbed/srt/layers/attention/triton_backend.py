"""Triton attention backend: buffers and metadata for target-verify passes, eager and in graphs.

Laid out like SGLang's `srt/layers/attention/triton_backend.py`: static CUDA-graph buffers are
allocated in `init_cuda_graph_state(max_bs, max_num_tokens)`, a captured graph keeps the buffers
it was captured with, and replay copies each step's inputs into the backend's static buffers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Optional

from ....device import Tensor, torch
from ...model_executor.forward_batch_info import ForwardBatch
from .triton_ops.tree_attention import (
    MaskLayout,
    TreeAttentionKernel,
    VisibleRow,
    write_input_ids,
    write_kv_indices,
    write_tree_mask,
)

if TYPE_CHECKING:
    from ...model_executor.model_runner import ModelRunner


@dataclass
class ForwardMetadata:
    kv_indices: Tensor
    custom_mask: Tensor
    layout: MaskLayout
    scratch: List[Tensor] = field(default_factory=list)  # eager buffers, freed after the pass


class TritonAttnBackend:
    def __init__(self, model_runner: ModelRunner):
        max_bs = model_runner.req_to_token_pool.size
        self.device = model_runner.device
        self.num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens or 1
        self.default_num_draft_tokens = (
            model_runner.draft_model_config.num_draft_tokens or self.num_draft_tokens
        )
        self.max_context_len = model_runner.model_config.context_len
        self.num_head = model_runner.model_config.num_attention_heads
        self.v_head_dim = model_runner.model_config.head_dim
        self.max_kv_splits = 8
        # Trees wider than this are verified in waves; see CudaGraphRunner.
        self.max_wave_tokens = model_runner.scenario.defects.graph_capture.max_wave_tokens
        self.kernel = self.make_kernel(model_runner)

        self.kv_indptr = torch.zeros((max_bs + 1,), dtype=torch.int32, device=self.device)
        self.qo_indptr = torch.zeros((max_bs + 1,), dtype=torch.int64, device=self.device)
        self.mask_indptr = torch.zeros((max_bs + 1,), dtype=torch.int64, device=self.device)

        self.cuda_graph_custom_mask: Optional[Tensor] = None
        self.cuda_graph_max_bs = 0
        self.eager_only_from = model_runner.scenario.defects.eager_only.min_draft_tokens

    def make_kernel(self, model_runner: ModelRunner) -> TreeAttentionKernel:
        kernel_defect = model_runner.scenario.defects.kernel
        return TreeAttentionKernel(
            self.device,
            model_runner.token_to_kv_pool,
            arch=model_runner.scenario.gpu.arch,
            faulty_arch=kernel_defect.arch,
            tile_rows=kernel_defect.tile_rows,
            max_rows=kernel_defect.max_rows,
        )

    # -- eager ------------------------------------------------------------------------------
    def init_forward_metadata(self, forward_batch: ForwardBatch) -> ForwardMetadata:
        """Eager mode: fresh buffers sized for exactly this batch."""
        ndt = forward_batch.num_draft_tokens
        seq_lens = forward_batch.seq_lens
        bug = self.eager_only_from
        if bug is not None and ndt >= bug:
            # (f) the ragged indexer of the eager path is only right for narrow trees
            raise IndexError(f"index {ndt} is out of bounds for dimension 0 with size {bug}")
        kv_indptr = forward_batch.kv_indptr()
        kv_indices = torch.empty((max(1, sum(seq_lens)),), dtype=torch.int64, device=self.device)
        mask_sizes = [ndt * (seq_len + ndt) for seq_len in seq_lens]
        custom_mask = torch.empty((sum(mask_sizes),), dtype=torch.uint8, device=self.device)
        indptr, total = [], 0
        for size in mask_sizes:
            indptr.append(total)
            total += size
        layout = MaskLayout(static=False, indptr=tuple(indptr))
        write_kv_indices(self.device, kv_indices, kv_indptr, forward_batch.kv_locs)
        write_tree_mask(self.device, custom_mask, layout, seq_lens, forward_batch.trees, ndt)
        return ForwardMetadata(kv_indices, custom_mask, layout, scratch=[kv_indices, custom_mask])

    # -- CUDA graph -------------------------------------------------------------------------
    def init_cuda_graph_state(
        self,
        max_bs: int,
        max_num_tokens: int,
        num_tokens_per_bs: Optional[int] = None,
    ) -> None:
        if num_tokens_per_bs is None:
            # callers that predate tree verification don't pass the verify width
            num_tokens_per_bs = self.default_num_draft_tokens
        self.cuda_graph_max_bs = max_bs
        self.cuda_graph_attn_logits = torch.zeros(
            (max_num_tokens, self.num_head, self.max_kv_splits, self.v_head_dim),
            dtype=torch.float32,
            device=self.device,
        )
        self.cuda_graph_attn_lse = torch.zeros(
            (max_num_tokens, self.num_head, self.max_kv_splits),
            dtype=torch.float32,
            device=self.device,
        )
        self.cuda_graph_num_kv_splits = torch.full(
            (max_num_tokens,),
            self.max_kv_splits,
            dtype=torch.int32,
            device=self.device,
        )
        self.cuda_graph_kv_indices = torch.zeros(
            (max_num_tokens * self.max_context_len,),
            dtype=torch.int64,
            device=self.device,
        )
        self.cuda_graph_custom_mask = torch.zeros(
            (num_tokens_per_bs * max_bs * (self.max_context_len + num_tokens_per_bs),),
            dtype=torch.uint8,
            device=self.device,
        )

    def _static_layout(self) -> MaskLayout:
        return MaskLayout(static=True, max_bs=self.cuda_graph_max_bs,
                          max_context_len=self.max_context_len)

    def init_forward_metadata_capture_cuda_graph(self, bs: int) -> ForwardMetadata:
        """What a graph captured now will read from: the static buffers held at this moment."""
        assert self.cuda_graph_custom_mask is not None, "init_cuda_graph_state first"
        return ForwardMetadata(self.cuda_graph_kv_indices, self.cuda_graph_custom_mask,
                               self._static_layout())

    def init_forward_metadata_replay_cuda_graph(self, forward_batch: ForwardBatch) -> None:
        """Copy this step's KV indices and tree mask into the backend's static buffers."""
        assert self.cuda_graph_custom_mask is not None, "init_cuda_graph_state first"
        write_kv_indices(self.device, self.cuda_graph_kv_indices, forward_batch.kv_indptr(),
                         forward_batch.kv_locs)
        write_tree_mask(self.device, self.cuda_graph_custom_mask, self._static_layout(),
                        forward_batch.seq_lens, forward_batch.trees,
                        forward_batch.num_draft_tokens)

    # -- the pass ---------------------------------------------------------------------------
    def forward_target_verify(self, forward_batch: ForwardBatch, metadata: ForwardMetadata,
                              input_ids: Tensor) -> list[list[VisibleRow]]:
        return self.kernel.run(
            seq_lens=forward_batch.seq_lens,
            ndt=forward_batch.num_draft_tokens,
            kv_indptr=forward_batch.kv_indptr(),
            kv_indices=metadata.kv_indices,
            mask=metadata.custom_mask,
            layout=metadata.layout,
            input_ids=input_ids,
        )

    def write_input_ids(self, input_ids: Tensor, forward_batch: ForwardBatch) -> None:
        write_input_ids(self.device, input_ids, forward_batch.trees)
