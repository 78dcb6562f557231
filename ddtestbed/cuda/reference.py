"""What the CUDA mode's kernels compute, in plain Python (no torch), and how the host reads it.

The verify kernel runs one program per (request i, tree node r). It reads the node's mask row at
`base[i] + r * stride[i]` (the same layouts as the CPU kernel, `MaskLayout.row_offset`), then:

* for every prefix column j < seq_len whose mask byte is non-zero it gathers the token held at
  KV location `kv_indices[kv_indptr[i] + j]` and stores it in `gathered[row][j]` (-1 for hidden
  columns); it also counts the visible columns (`nvis`) and sums `token * (j + 1)` (`psum`);
* for every tree column t < ndt it stores `input_ids[i * ndt + t]` where the mask byte is
  non-zero, else -1 (`tree`).

The host then rebuilds what each node saw: the whole prefix when nvis == seq_len and psum
equals the checksum of the request's own KV tokens (the usual case, no copy of `gathered`),
nothing when nvis == 0, and otherwise exactly the tokens the kernel gathered. So a corrupted
mask or KV index changes what the target model sees, as on the CPU mode.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

VisibleRow = tuple[tuple[int, ...], tuple[int, ...]]


def static_rows(max_bs: int, max_context_len: int, width: int,
                bs: int) -> tuple[list[int], list[int]]:
    """(base, stride) per request of the graph layout `[ndt][max_bs][max_context_len + width]`."""
    pitch = max_context_len + width
    return [i * pitch for i in range(bs)], [max_bs * pitch] * bs


def ragged_rows(seq_lens: Sequence[int], ndt: int, width: int) -> tuple[list[int], list[int]]:
    """(base, stride) per request of the eager layout: request i at indptr[i], rows of
    `seq_len_i + width` bytes; indptr counts `ndt * (seq_len + ndt)` bytes per request."""
    base, total = [], 0
    for s in seq_lens:
        base.append(total)
        total += ndt * (s + ndt)
    return base, [s + width for s in seq_lens]


def ragged_mask_bytes(seq_lens: Sequence[int], ndt: int) -> int:
    return sum(ndt * (s + ndt) for s in seq_lens)


def prefix_checksum(tokens: Sequence[int]) -> int:
    """sum(token * (j + 1)): what the kernel's psum is when the whole prefix is visible."""
    return sum(t * (j + 1) for j, t in enumerate(tokens))


def ancestor_rows(parents_per_tree: Sequence[Sequence[int]], ndt: int) -> bytes:
    """Dense [bs][ndt][ndt] uint8: row r has 1 at r and at each of r's ancestors."""
    out = bytearray()
    for parents in parents_per_tree:
        for r in range(ndt):
            row = bytearray(ndt)
            i = r
            while i >= 0:
                row[i] = 1
                i = parents[i]
            out += row
    return bytes(out)


def write_tree_mask(mask: bytearray, anc: bytes, seq_lens: Sequence[int], base: Sequence[int],
                    stride: Sequence[int], ndt: int) -> None:
    """The mask writer's semantics (the Python list raises where the GPU would overrun)."""
    for i, s in enumerate(seq_lens):
        for r in range(ndt):
            off = base[i] + r * stride[i]
            if off + s + ndt > len(mask):
                raise IndexError(f"mask write up to byte {off + s + ndt} of a {len(mask)}-byte "
                                 f"buffer")
            a = anc[(i * ndt + r) * ndt:(i * ndt + r + 1) * ndt]
            mask[off:off + s + ndt] = b"\x01" * s + a


def verify(mask: bytes, base: Sequence[int], stride: Sequence[int], seq_lens: Sequence[int],
           ndt: int, kv_indptr: Sequence[int], kv_indices: Sequence[int],
           kv_tokens: Sequence[int], input_ids: Sequence[int]
           ) -> tuple[list[int], list[int], list[int], list[list[int]]]:
    """(nvis, psum, tree, gathered) per row i * ndt + r, as the verify kernel writes them."""
    nvis, psum, tree, gathered = [], [], [], []
    for i, s in enumerate(seq_lens):
        for r in range(ndt):
            off = base[i] + r * stride[i]
            row = mask[off:off + s + ndt] if s > 0 else b""
            g, n, total = [], 0, 0
            for j in range(s):
                if row[j]:
                    tok = kv_tokens[kv_indices[kv_indptr[i] + j]]
                    g.append(tok)
                    n += 1
                    total += tok * (j + 1)
                else:
                    g.append(-1)
            nvis.append(n)
            psum.append(total)
            gathered.append(g)
            for t in range(ndt):
                visible = s > 0 and row[s + t] != 0
                tree.append(input_ids[i * ndt + t] if visible else -1)
    return nvis, psum, tree, gathered


def decode_rows(nvis: Sequence[int], psum: Sequence[int], tree: Sequence[int],
                seq_lens: Sequence[int], ndt: int, prefixes: Sequence[tuple[int, ...]],
                gathered_row: Callable[[int, int], Sequence[int]]) -> list[list[VisibleRow]]:
    """The kernel's outputs -> (visible prefix tokens, visible tree tokens) per node.

    `prefixes[i]` is request i's own KV tokens (host truth); `gathered_row(row, n)` fetches the
    first n gathered tokens of one row from the device, only for rows that need it."""
    out: list[list[VisibleRow]] = []
    for i, s in enumerate(seq_lens):
        want = prefix_checksum(prefixes[i])
        rows: list[VisibleRow] = []
        for r in range(ndt):
            k = i * ndt + r
            if nvis[k] == s and psum[k] == want:
                seen: tuple[int, ...] = prefixes[i]
            elif nvis[k] == 0:
                seen = ()
            else:
                seen = tuple(t for t in gathered_row(k, s) if t != -1)
            ids = tuple(t for t in tree[k * ndt:(k + 1) * ndt] if t != -1)
            rows.append((seen, ids))
        out.append(rows)
    return out
