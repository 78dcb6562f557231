"""Triton kernels of the CUDA mode; `reference.py` states what each computes in plain Python.

* `write_tree_mask_kernel` writes each node's mask row (prefix ones, then its ancestor row).
  Its store is masked to the row's own width only, never to the buffer's size: a buffer sized
  for fewer draft tokens than are written is overrun in device memory (defect (a)), exactly as
  a kernel that trusts its caller's sizing does.
* `verify_kernel` reads the rows back, gathers the visible prefix through the KV indices and the
  visible tree tokens; its outputs decide what the target model sees.
* `embed_kernel` / `layer_kernel` stand in for the model's layers: many small launches per
  verify pass, which is what CUDA graphs save (the graph/eager ratio measures them).
"""
from __future__ import annotations

import triton
import triton.language as tl

MASK_BLOCK = 1024
PREFIX_BLOCK = 256
LAYER_BLOCK = 1024


@triton.jit(do_not_specialize=["ndt"])
def write_tree_mask_kernel(mask_ptr, anc_ptr, seq_lens_ptr, base_ptr, stride_ptr, ndt,
                           BLOCK: tl.constexpr):
    i = tl.program_id(0)
    r = tl.program_id(1)
    blk = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + i)
    base = tl.load(base_ptr + i)
    stride = tl.load(stride_ptr + i)
    cols = blk * BLOCK + tl.arange(0, BLOCK)
    in_row = cols < seq_len + ndt
    is_tree = in_row & (cols >= seq_len)
    anc = tl.load(anc_ptr + (i * ndt + r) * ndt + (cols - seq_len), mask=is_tree, other=0)
    val = tl.where(cols < seq_len, 1, anc).to(tl.uint8)
    # bounded by the row, not by the buffer: an undersized buffer is overrun here
    tl.store(mask_ptr + base + r * stride + cols, val, mask=in_row)


@triton.jit(do_not_specialize=["ndt", "gpitch"])
def verify_kernel(mask_ptr, base_ptr, stride_ptr, seq_lens_ptr, kv_indptr_ptr, kv_indices_ptr,
                  kv_tokens_ptr, input_ids_ptr, nvis_ptr, psum_ptr, tree_ptr, gathered_ptr,
                  scale_ptr, logit_scale, ndt, gpitch, BLOCK: tl.constexpr,
                  TBLOCK: tl.constexpr):
    i = tl.program_id(0)
    r = tl.program_id(1)
    # the logit scale is a launch parameter: a captured graph replays the value it had at
    # capture (defect (g) leaves the dummy batch's there); it is written back per row
    tl.store(scale_ptr + i * ndt + r, logit_scale)
    seq_len = tl.load(seq_lens_ptr + i)
    live = seq_len > 0  # padding slots of a padded graph batch: nothing to read
    base = tl.load(base_ptr + i)
    stride = tl.load(stride_ptr + i)
    row = mask_ptr + base + r * stride
    kv0 = tl.load(kv_indptr_ptr + i).to(tl.int64)
    out = i * ndt + r
    g = gathered_ptr + out.to(tl.int64) * gpitch
    nvis = tl.zeros([BLOCK], dtype=tl.int32)
    psum = tl.zeros([BLOCK], dtype=tl.int64)
    for start in range(0, seq_len, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inb = cols < seq_len
        m = tl.load(row + cols, mask=inb, other=0)
        vis = inb & (m != 0)
        loc = tl.load(kv_indices_ptr + kv0 + cols, mask=vis, other=0)
        tok = tl.load(kv_tokens_ptr + loc, mask=vis, other=0)
        tl.store(g + cols, tl.where(vis, tok, -1), mask=inb)
        nvis += vis.to(tl.int32)
        psum += tl.where(vis, tok.to(tl.int64) * (cols + 1).to(tl.int64), 0)
    tl.store(nvis_ptr + out, tl.sum(nvis, axis=0))
    tl.store(psum_ptr + out, tl.sum(psum, axis=0))
    tcols = tl.arange(0, TBLOCK)
    t_in = tcols < ndt
    t_live = t_in & live
    tm = tl.load(row + seq_len + tcols, mask=t_live, other=0)
    ids = tl.load(input_ids_ptr + i * ndt + tcols, mask=t_live, other=0)
    tl.store(tree_ptr + out * ndt + tcols, tl.where(t_live & (tm != 0), ids, -1), mask=t_in)


@triton.jit(do_not_specialize=["n", "width"])
def embed_kernel(h_ptr, ids_ptr, n, width, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tok = tl.load(ids_ptr + offs // width, mask=m, other=0)
    tl.store(h_ptr + offs, (tok % 997).to(tl.float32) * 0.001, mask=m)


@triton.jit(do_not_specialize=["n", "width"])
def layer_kernel(h_ptr, w_ptr, b_ptr, n, width, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    col = offs % width
    h = tl.load(h_ptr + offs, mask=m, other=0.0)
    w = tl.load(w_ptr + col, mask=m, other=0.0)
    b = tl.load(b_ptr + col, mask=m, other=0.0)
    tl.store(h_ptr + offs, tl.sigmoid(h * w + b), mask=m)


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())
