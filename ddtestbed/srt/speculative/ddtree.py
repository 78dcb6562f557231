"""Draft trees: best-first construction under a node budget, ancestor masks, and acceptance.

Node 0 is the root: the last verified token (its KV is computed by the verify pass). A tree has
`budget + 1` nodes, i.e. `--speculative-num-draft-tokens`. Children come from the drafter's
ranked candidates (at most `topk` per node, depth at most `num_steps`), picked best-first by
the product of draft probabilities along the path, as DDTree does (arXiv:2604.12989).
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...model import Context, DraftModel


@dataclass
class DraftTree:
    tokens: list[int]
    parents: list[int]
    depths: list[int]
    paths: list[tuple[int, ...]] = field(default_factory=list)  # tokens root..node

    @property
    def size(self) -> int:
        return len(self.tokens)

    def ancestor_row(self, i: int, width: int) -> bytes:
        """Row i of the tree mask: 1 where node j is i or an ancestor of i."""
        row = bytearray(width)
        while i >= 0:
            row[i] = 1
            i = self.parents[i]
        return bytes(row)

    def children(self) -> list[dict[int, int]]:
        out: list[dict[int, int]] = [{} for _ in self.tokens]
        for i in range(1, len(self.tokens)):
            out[self.parents[i]].setdefault(self.tokens[i], i)
        return out


def build_tree(draft: DraftModel, ctx: Context, root: int, budget: int, topk: int,
               max_depth: int) -> DraftTree:
    tree = DraftTree([root], [-1], [0], [(root,)])
    heap: list[tuple[float, int, int, int]] = []  # (-score, tiebreak, parent, token)
    counter = 0

    def expand(node: int, score: float) -> None:
        nonlocal counter
        depth = tree.depths[node] + 1
        if depth > max_depth:
            return
        for token, prob in draft.propose(ctx, tree.paths[node], depth, topk):
            counter += 1
            heapq.heappush(heap, (-score * prob, counter, node, token))

    expand(0, 1.0)
    while heap and len(tree.tokens) < budget + 1:
        neg, _, parent, token = heapq.heappop(heap)
        tree.tokens.append(token)
        tree.parents.append(parent)
        tree.depths.append(tree.depths[parent] + 1)
        tree.paths.append(tree.paths[parent] + (token,))
        expand(len(tree.tokens) - 1, -neg)
    # a budget the drafter cannot fill (tiny topk/depth) is padded with leaf copies of the root
    while len(tree.tokens) < budget + 1:
        tree.tokens.append(root)
        tree.parents.append(0)
        tree.depths.append(1)
        tree.paths.append((root, root))
    return tree


def accept(tree: DraftTree, predictions: Sequence[int]) -> tuple[list[int], int]:
    """Longest root path whose every token equals the target's prediction at its parent.
    Returns (accepted node indices, bonus token = prediction at the last accepted node)."""
    kids = tree.children()
    node, accepted = 0, []
    while True:
        nxt = kids[node].get(predictions[node])
        if nxt is None:
            return accepted, predictions[node]
        accepted.append(nxt)
        node = nxt
