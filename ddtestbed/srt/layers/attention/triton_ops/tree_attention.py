"""Tree-verify attention "kernels": they write and read device buffers through raw addresses.

Mask layouts (uint8, 1 = visible; row r of request i is `seq_len + num_draft_tokens` bytes:
the prefix columns then one column per tree node):

* ragged (eager, like SGLang's `mask_indptr`): request i starts at `indptr[i]`, rows follow each
  other with pitch `seq_len_i + num_draft_tokens`;
* static (CUDA graph): a fixed `[num_draft_tokens][max_bs][max_context_len + num_draft_tokens]`
  block, node-major, so a captured kernel's addressing never depends on per-request lengths.

Writes and reads go through `DeviceArena.write/read`, which check only that the address is
mapped: a buffer that is too small is overrun silently until the write leaves its segment.
"""
from __future__ import annotations

from array import array
from itertools import compress
from collections.abc import Sequence
from dataclasses import dataclass

from .....device import DeviceArena, Tensor
from ....mem_cache.memory_pool import TokenToKVPool
from ....speculative.ddtree import DraftTree

VisibleRow = tuple[tuple[int, ...], tuple[int, ...]]  # (visible prefix tokens, visible tree tokens)


@dataclass(frozen=True)
class MaskLayout:
    static: bool
    max_bs: int = 0
    max_context_len: int = 0
    indptr: tuple[int, ...] = ()

    def row_offset(self, i: int, r: int, seq_len: int, width: int) -> int:
        if self.static:
            return (r * self.max_bs + i) * (self.max_context_len + width)
        return self.indptr[i] + r * (seq_len + width)


def write_tree_mask(device: DeviceArena, mask: Tensor, layout: MaskLayout,
                    seq_lens: Sequence[int], trees: Sequence[DraftTree], ndt: int) -> None:
    base = mask.data_ptr()
    for i, (seq_len, tree) in enumerate(zip(seq_lens, trees)):
        ones = b"\x01" * seq_len
        for r in range(ndt):
            device.write(base + layout.row_offset(i, r, seq_len, ndt),
                         ones + tree.ancestor_row(r, ndt))


def write_kv_indices(device: DeviceArena, kv_indices: Tensor, kv_indptr: Sequence[int],
                     kv_locs: Sequence[Sequence[int]]) -> None:
    base = kv_indices.data_ptr()
    for start, locs in zip(kv_indptr, kv_locs):
        if len(locs):
            device.write(base + 8 * start, array("q", locs).tobytes())


def write_input_ids(device: DeviceArena, input_ids: Tensor, trees: Sequence[DraftTree]) -> None:
    flat = [t for tree in trees for t in tree.tokens]
    device.write(input_ids.data_ptr(), array("q", flat).tobytes())


class TreeAttentionKernel:
    """Reads, per tree node, which prefix tokens and which tree tokens it attends to."""

    def __init__(self, device: DeviceArena, kv_pool: TokenToKVPool, *, arch: str,
                 faulty_arch: str | None = None, tile_rows: int | None = None,
                 max_rows: int | None = None) -> None:
        self.device, self.kv_pool = device, kv_pool
        self.arch, self.faulty_arch, self.tile_rows = arch, faulty_arch, tile_rows
        self.max_rows = max_rows

    def row_width(self, ndt: int) -> int:
        """Row pitch (in tree columns) the kernel walks the mask with."""
        if self.faulty_arch == self.arch and self.tile_rows is not None and \
                ndt > self.tile_rows and (self.max_rows is None or ndt <= self.max_rows):
            # The tiled path for this arch takes the pitch from its row tile, which is only
            # right while the whole tree fits in one tile.
            return self.tile_rows
        return ndt

    def run(self, *, seq_lens: Sequence[int], ndt: int, kv_indptr: Sequence[int],
            kv_indices: Tensor, mask: Tensor, layout: MaskLayout,
            input_ids: Tensor) -> list[list[VisibleRow]]:
        device = self.device
        width = self.row_width(ndt)
        kv_base, mask_base = kv_indices.data_ptr(), mask.data_ptr()
        ids = array("q", device.read(input_ids.data_ptr(), 8 * ndt * len(seq_lens)))
        out: list[list[VisibleRow]] = []
        for i, seq_len in enumerate(seq_lens):
            locs = array("q", device.read(kv_base + 8 * kv_indptr[i], 8 * seq_len))
            prefix = tuple(self.kv_pool.gather(locs))
            nodes = ids[i * ndt:(i + 1) * ndt]
            rows: list[VisibleRow] = []
            for r in range(ndt):
                row = device.read(mask_base + layout.row_offset(i, r, seq_len, width),
                                  seq_len + ndt)
                hidden = row.count(0, 0, seq_len)
                if hidden == 0:
                    seen = prefix
                elif hidden == seq_len:
                    seen = ()
                else:
                    seen = tuple(compress(prefix, row[:seq_len]))
                rows.append((seen, tuple(compress(nodes, row[seq_len:]))))
            out.append(rows)
        return out
