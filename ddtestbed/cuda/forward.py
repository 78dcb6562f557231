"""One verify pass on the GPU: launch the kernels, then read back what each node saw.

The same launches run eagerly (fresh buffers per step) and inside captured CUDA graphs (static
buffers bound at capture time). Nothing here allocates while a graph is being captured.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import triton

from . import kernels as K
from .reference import VisibleRow, ancestor_rows, decode_rows

HIDDEN_WIDTH = 2048  # the stand-in layers' width: small, so a pass is launch-bound like decode


@dataclass
class VerifyOut:
    """Output buffers of the verify kernel for `rows` = bs * ndt nodes."""

    nvis: torch.Tensor  # int32 [rows]
    psum: torch.Tensor  # int64 [rows]
    tree: torch.Tensor  # int64 [rows * ndt]
    gathered: torch.Tensor  # int32 [rows * gpitch]
    hidden: torch.Tensor  # float32 [rows * HIDDEN_WIDTH]
    gpitch: int
    scale: torch.Tensor = None  # type: ignore[assignment]  # float32 [rows]: the logit scale used

    @classmethod
    def alloc(cls, rows: int, ndt: int, gpitch: int, device: torch.device) -> VerifyOut:
        rows = max(1, rows)
        gpitch = max(1, gpitch)
        return cls(nvis=torch.zeros(rows, dtype=torch.int32, device=device),
                   psum=torch.zeros(rows, dtype=torch.int64, device=device),
                   tree=torch.zeros(rows * ndt, dtype=torch.int64, device=device),
                   gathered=torch.zeros(rows * gpitch, dtype=torch.int32, device=device),
                   hidden=torch.zeros(rows * HIDDEN_WIDTH, dtype=torch.float32, device=device),
                   gpitch=gpitch, scale=torch.zeros(rows, dtype=torch.float32, device=device))


class TinyLayers:
    """`num_layers` elementwise layers over the draft tokens' hidden states."""

    def __init__(self, num_layers: int, device: torch.device) -> None:
        g = torch.Generator().manual_seed(0)
        self.w = (torch.rand((num_layers, HIDDEN_WIDTH), generator=g) * 0.5 + 0.5).to(device)
        self.b = (torch.rand((num_layers, HIDDEN_WIDTH), generator=g) - 0.5).to(device)
        self.num_layers = num_layers

    def launch(self, hidden: torch.Tensor, input_ids: torch.Tensor, num_tokens: int) -> None:
        n = num_tokens * HIDDEN_WIDTH
        grid = (triton.cdiv(n, K.LAYER_BLOCK),)
        K.embed_kernel[grid](hidden, input_ids, n, HIDDEN_WIDTH, BLOCK=K.LAYER_BLOCK)
        for layer in range(self.num_layers):
            K.layer_kernel[grid](hidden, self.w[layer], self.b[layer], n, HIDDEN_WIDTH,
                                 BLOCK=K.LAYER_BLOCK)


def write_tree_mask(mask: torch.Tensor, parents: Sequence[Sequence[int]],
                    seq_lens: Sequence[int], base: Sequence[int], stride: Sequence[int],
                    ndt: int) -> None:
    """Write every node's mask row of `len(seq_lens)` requests into `mask` (no bounds check)."""
    bs = len(seq_lens)
    if bs == 0:
        return
    dev = mask.device
    anc = torch.frombuffer(bytearray(ancestor_rows(parents, ndt)), dtype=torch.uint8).to(dev)
    seq = torch.tensor(list(seq_lens), dtype=torch.int32).to(dev)
    b = torch.tensor(list(base), dtype=torch.int64).to(dev)
    s = torch.tensor(list(stride), dtype=torch.int64).to(dev)
    grid = (bs, ndt, triton.cdiv(max(seq_lens) + ndt, K.MASK_BLOCK))
    K.write_tree_mask_kernel[grid](mask, anc, seq, b, s, ndt, BLOCK=K.MASK_BLOCK)


def write_kv_indices(kv_indices: torch.Tensor, kv_locs: Sequence[Sequence[int]]) -> None:
    flat = [loc for locs in kv_locs for loc in locs]
    if flat:
        kv_indices[:len(flat)].copy_(torch.tensor(flat, dtype=torch.int64))


def write_ids(dest: torch.Tensor, values: Sequence[int]) -> None:
    if len(values):
        dest[:len(values)].copy_(torch.tensor(list(values), dtype=dest.dtype))


def launch_verify(*, mask: torch.Tensor, base: torch.Tensor, stride: torch.Tensor,
                  seq_lens: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
                  kv_tokens: torch.Tensor, input_ids: torch.Tensor, out: VerifyOut, bs: int,
                  ndt: int, logit_scale: float = 1.0) -> None:
    K.verify_kernel[(bs, ndt)](mask, base, stride, seq_lens, kv_indptr, kv_indices, kv_tokens,
                               input_ids, out.nvis, out.psum, out.tree, out.gathered, out.scale,
                               float(logit_scale), ndt, out.gpitch, BLOCK=K.PREFIX_BLOCK,
                               TBLOCK=K.next_pow2(ndt))


def used_scale(out: VerifyOut) -> float:
    """The logit scale the last verify pass ran with, as the kernel wrote it."""
    return float(out.scale[0].item())


def read_rows(out: VerifyOut, seq_lens: Sequence[int], ndt: int,
              prefixes: Sequence[tuple[int, ...]]) -> list[list[VisibleRow]]:
    """Copy the outputs of `len(seq_lens)` requests to the host and rebuild each node's view."""
    n = len(seq_lens) * ndt
    nvis = out.nvis[:n].tolist()
    psum = out.psum[:n].tolist()
    tree = out.tree[:n * ndt].tolist()

    def gathered_row(row: int, count: int) -> list[int]:
        start = row * out.gpitch
        return out.gathered[start:start + count].tolist()

    return decode_rows(nvis, psum, tree, seq_lens, ndt, prefixes, gathered_row)
