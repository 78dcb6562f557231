"""Attention backends of the CUDA mode: the CPU mode's classes, with GPU kernels for the writes.

`init_cuda_graph_state` is inherited untouched from `srt/layers/attention/triton_backend.py`:
the graph buffers are allocated by the same lines (same shape expressions, hence the same
grep-buffers rows and the same oversize patches), only now as real device tensors.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from ..srt.layers.attention.triton_backend import ForwardMetadata, TritonAttnBackend
from ..srt.layers.attention.triton_ops.tree_attention import MaskLayout
from ..srt.model_executor.forward_batch_info import ForwardBatch
from . import forward as F
from .reference import ragged_mask_bytes, ragged_rows, static_rows

if TYPE_CHECKING:
    from .device import CudaDevice


class CudaAttnMixin:
    """Eager metadata and graph-replay writes on the GPU (both backends share them)."""

    device: CudaDevice
    max_context_len: int
    cuda_graph_max_bs: int
    cuda_graph_kv_indices: Any
    cuda_graph_custom_mask: Any
    kv_indptr: Any

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> ForwardMetadata:
        """Eager mode: fresh buffers sized for exactly this batch (ragged mask)."""
        ndt, seq_lens = forward_batch.num_draft_tokens, forward_batch.seq_lens
        dev = self.device
        kv_indices = dev.empty((max(1, sum(seq_lens)),), torch.int64)
        custom_mask = dev.empty((max(1, ragged_mask_bytes(seq_lens, ndt)),), torch.uint8)
        base, stride = ragged_rows(seq_lens, ndt, ndt)
        layout = MaskLayout(static=False, indptr=tuple(base))
        F.write_kv_indices(kv_indices, forward_batch.kv_locs)
        F.write_tree_mask(custom_mask, [t.parents for t in forward_batch.trees], seq_lens,
                          base, stride, ndt)
        return ForwardMetadata(kv_indices, custom_mask, layout)

    def init_forward_metadata_replay_cuda_graph(self, forward_batch: ForwardBatch) -> None:
        """Write this step's KV indices and tree mask into the backend's *current* buffers."""
        assert self.cuda_graph_custom_mask is not None, "init_cuda_graph_state first"
        ndt, seq_lens = forward_batch.num_draft_tokens, forward_batch.seq_lens
        F.write_kv_indices(self.cuda_graph_kv_indices, forward_batch.kv_locs)
        F.write_ids(self.kv_indptr, forward_batch.kv_indptr())
        base, stride = static_rows(self.cuda_graph_max_bs, self.max_context_len, ndt,
                                   len(seq_lens))
        F.write_tree_mask(self.cuda_graph_custom_mask, [t.parents for t in forward_batch.trees],
                          seq_lens, base, stride, ndt)

    def write_input_ids(self, input_ids: torch.Tensor, forward_batch: ForwardBatch) -> None:
        F.write_ids(input_ids, [t for tree in forward_batch.trees for t in tree.tokens])


class CudaTritonAttnBackend(CudaAttnMixin, TritonAttnBackend):
    pass


class CudaTorchNativeAttnBackend(CudaAttnMixin, TorchNativeAttnBackend):
    pass
