"""Static evidence on real SGLang releases (installed --no-deps): sizes come from what the
caller passes, draft backends get the draft's width, a local `x = None` is not `self.x`,
and the context length decides which buffer is suspect.

Expected (from reading each release's triton_backend.py and cuda_graph_runner.py first):
- 0.4.3.post4, 0.4.6.post5: `init_cuda_graph_state(self.max_num_token)` (max_bs * draft
  tokens) into a parameter named `max_bs`: the triton custom mask is max_bs * draft_tokens *
  context_len, grows with the budget, is not "fixed-size"; the multi-step draft backend's
  kv indices get the draft runner's max_bs * topk.
- 0.4.3.post4: `gathered_buffer = None` is a local in replay(): no none-then-allocated flag.
- 0.4.3.post4 .. 0.5.10 with the context length: the custom mask is the only suspect (short
  by max_bs x draft x (draft - 2) at seq_len = context_len - 2); without it, a dozen or more
  tier-2 buffers are.
"""
from __future__ import annotations

import pytest

from ddprobe import remote
from ddprobe.bisect.static import find_suspects
from ddprobe.inventory import Host
from ddprobe.sources.buffers import SizingParams
from ddprobe.sources.fetch import grep_buffers

TRITON = "srt/layers/attention/triton_backend.py"


def _report(sglang_venv, version: str, ctx: int | None):
    h = Host(name="src", python=str(sglang_venv(version)), transport="local")
    with remote.connect(h, remote.RemoteOptions()) as r:  # a local host
        return grep_buffers(r, h, backend="triton", params=SizingParams(
            max_bs=64, budgets=(8, 16, 32), context_len=ctx, topk=4, num_steps=3))


@pytest.mark.parametrize("version", ["0.4.3.post4", "0.4.6.post5"])
def test_sizes_from_the_caller_not_the_parameter_name(version: str, sglang_venv) -> None:
    rep = _report(sglang_venv, version, 32768)
    mask = [r for r in rep.find("cuda_graph_custom_mask") if r.file == TRITON][0]
    assert "draft_tokens" in mask.resolved and "context_len" in mask.resolved
    assert "fixed-size-growing-use" not in mask.flags
    assert any("parameter of init_cuda_graph_state" in n and "cuda_graph_runner.py" in n
               for n in mask.notes), mask.notes
    sizes = {s.budget: s.bytes for s in mask.sizes}
    assert sizes[32] > sizes[16] > sizes[8]  # grows with the budget
    draft = [r for r in rep.find("cuda_graph_kv_indices") if "num_steps" in (r.resolved or "")]
    assert draft and "max_bs * topk" in draft[0].resolved, [r.resolved for r in draft]


def test_a_local_named_like_an_attribute_is_not_it(sglang_venv) -> None:
    rep = _report(sglang_venv, "0.4.3.post4", 32768)
    gb = rep.find("gathered_buffer")
    assert gb and all("none-then-allocated" not in r.flags for r in gb)
    assert all(not r.none_sites for r in gb)


@pytest.mark.parametrize("version", ["0.4.3.post4", "0.4.6.post5", "0.5.2", "0.5.10"])
def test_the_context_length_decides_the_suspect(version: str, sglang_venv) -> None:
    with_ctx = find_suspects(_report(sglang_venv, version, 32768))
    assert [(s.attr, s.tier) for s in with_ctx] == [("cuda_graph_custom_mask", 1)]
    short = [z for z in with_ctx[0].sizes if z.get("short_by")]
    # max_bs x draft x (draft - 2) at b8: the layout at the longest seq_len a request
    # reaches (context_len - 2: max_req_len = context_len - 1, max_new_tokens capped below it)
    assert short and short[0]["short_by"] == 64 * 9 * 7
    without = find_suspects(_report(sglang_venv, version, None))
    assert "cuda_graph_custom_mask" not in [s.attr for s in without]
    assert len(without) >= 10 and {s.tier for s in without} == {2}
