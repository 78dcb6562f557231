"""One speculative step for a batch: draft a tree per request, verify all trees in one pass."""
from __future__ import annotations

from dataclasses import dataclass

from ...model import DraftModel
from ..managers.schedule_batch import Req
from ..model_executor.forward_batch_info import ForwardBatch
from ..model_executor.model_runner import ModelRunner
from .ddtree import accept, build_tree


@dataclass
class StepResult:
    new_tokens: list[list[int]]  # per request: accepted draft tokens + bonus token
    accepted: list[int]  # per request: accepted draft tokens
    cuda_graph: bool
    padded_bs: int


class SpecWorker:
    def __init__(self, model_runner: ModelRunner, draft: DraftModel) -> None:
        args = model_runner.server_args
        self.model_runner, self.draft = model_runner, draft
        self.enabled = args.speculative_algorithm is not None
        self.num_draft_tokens = args.speculative_num_draft_tokens if self.enabled else 1
        self.topk = args.speculative_eagle_topk or 1
        self.max_depth = args.speculative_num_steps or 1

    def forward_batch_generation(self, reqs: list[Req]) -> StepResult:
        target = self.model_runner.target
        trees = []
        for req in reqs:
            committed = req.committed
            ctx = target.context(tuple(committed[:-1]))
            trees.append(build_tree(self.draft, ctx, committed[-1], self.num_draft_tokens - 1,
                                    self.topk, self.max_depth))
        batch = ForwardBatch(
            seq_lens=[len(r.kv_locs) for r in reqs],
            kv_locs=[r.kv_locs for r in reqs],
            trees=trees,
            num_draft_tokens=self.num_draft_tokens,
            sampling=[(r.sampling.temperature, r.sampling.seed) for r in reqs],
        )
        preds, graph, padded_bs = self.model_runner.forward_target_verify(batch)
        new_tokens, accepted = [], []
        for tree, pred in zip(trees, preds):
            nodes, bonus = accept(tree, pred)
            new_tokens.append([tree.tokens[n] for n in nodes] + [bonus])
            accepted.append(len(nodes))
        return StepResult(new_tokens, accepted, graph, padded_bs)
