"""Reference backend (torch_native; also stands in for flashinfer and fa3): the same buffers and
graph handling as the triton backend, but a plain kernel with no architecture-specific tiling."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .triton_backend import TritonAttnBackend
from .triton_ops.tree_attention import TreeAttentionKernel

if TYPE_CHECKING:
    from ...model_executor.model_runner import ModelRunner


class TorchNativeAttnBackend(TritonAttnBackend):
    def make_kernel(self, model_runner: ModelRunner) -> TreeAttentionKernel:
        return TreeAttentionKernel(self.device, model_runner.token_to_kv_pool,
                                   arch=model_runner.scenario.gpu.arch)
