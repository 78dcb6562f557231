"""Which files a backend's buffers live in follows the class hierarchy of the install.

Expected (from each release's attention_registry.py / model_runner.py, read first):
- 0.5.10 and 0.5.23 `--backend trtllm_mha`: TRTLLMHAAttnBackend(FlashInferAttnBackend), so
  FlashInfer's CUDA-graph buffers (flashinfer_backend.py) are found; a name-to-file table
  had no entry at all.
- 0.4.6.post5 `--backend flashinfer`: flashinfer_backend.py, read from model_runner.py's branch.
- a registered backend that subclasses TritonAttnBackend in its own file gets triton's
  custom mask; an unknown name is one clear error listing what the install knows.
"""
from __future__ import annotations

import pytest

from ddprobe import remote
from ddprobe.errors import UsageError
from ddprobe.inventory import Host
from ddprobe.sources.buffers import SizingParams, analyse_buffers
from ddprobe.sources.fetch import grep_buffers

FI = "srt/layers/attention/flashinfer_backend.py"
TRITON = "srt/layers/attention/triton_backend.py"
PARAMS = SizingParams(max_bs=8, budgets=(8,), context_len=4096)


def _grep(sglang_venv, version: str, backend: str):
    h = Host(name="src", python=str(sglang_venv(version)), transport="local")
    with remote.connect(h, remote.RemoteOptions()) as r:  # a local host
        return grep_buffers(r, h, backend=backend, params=PARAMS)


@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
def test_a_backend_that_inherits_flashinfer_finds_its_buffers(version: str,
                                                             sglang_venv) -> None:
    rep = _grep(sglang_venv, version, "trtllm_mha")
    assert FI in rep.files and "srt/layers/attention/trtllm_mha_backend.py" in rep.files
    assert any(r.file == FI and r.status == "found" for r in rep.rows)
    assert "TRTLLMHAAttnBackend" in rep.notes[0] and "FlashInferAttnBackend" in rep.notes[0]
    assert TRITON not in [r.file for r in rep.rows if r.status == "found"]


def test_old_releases_read_the_model_runner_branch(sglang_venv) -> None:
    rep = _grep(sglang_venv, "0.4.6.post5", "flashinfer")
    assert any("model_runner.py" in n for n in rep.notes)
    assert any(r.file == FI and r.status == "found" for r in rep.rows)


def test_the_testbed_model_runner_else_branch_and_its_base_class() -> None:
    """The testbed chooses in its model runner (`name = ...attention_backend or "triton"`;
    `if name == "triton": TritonAttnBackend(self) else: TorchNativeAttnBackend(self)`), and
    TorchNativeAttnBackend subclasses TritonAttnBackend: --backend flashinfer reads both files
    and finds the mask (expected before the run; it found nothing but the runner's buffers)."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "ddtestbed"
    texts = {str(p.relative_to(root)): p.read_text() for p in (root / "srt").rglob("*.py")}
    rep = analyse_buffers(texts, package="ddtestbed", backend="flashinfer", params=PARAMS)
    assert rep.notes[0] == ("--attention-backend flashinfer: TorchNativeAttnBackend "
                            "(srt/layers/attention/torch_native_backend.py) -> TritonAttnBackend "
                            "(srt/layers/attention/triton_backend.py)")
    assert any("model_runner.py: the branch --attention-backend flashinfer takes" in n
               for n in rep.notes)
    mask = rep.find("cuda_graph_custom_mask")
    assert mask and mask[0].file == TRITON
    tri = analyse_buffers(texts, package="ddtestbed", backend="triton", params=PARAMS)
    assert "TorchNativeAttnBackend" not in tri.notes[0]


def test_a_subclass_in_its_own_file() -> None:
    texts = {
        "srt/layers/attention/attention_registry.py":
            "def register_attention_backend(name):\n    return lambda f: f\n"
            "@register_attention_backend('mine')\ndef create_mine(runner):\n"
            "    from sglang.srt.layers.attention.mine import MineBackend\n"
            "    return MineBackend(runner)\n",
        "srt/layers/attention/mine.py":
            "from sglang.srt.layers.attention.triton_backend import TritonAttnBackend\n"
            "class MineBackend(TritonAttnBackend):\n    pass\n",
        TRITON: "import torch\nclass TritonAttnBackend:\n"
                "    def init_cuda_graph_state(self, max_bs, max_num_tokens):\n"
                "        self.cuda_graph_custom_mask = torch.zeros(\n"
                "            (max_num_tokens * self.max_context_len), dtype=torch.uint8)\n",
    }
    rep = analyse_buffers(texts, backend="mine", params=PARAMS)
    assert [r.attr for r in rep.rows if r.status == "found"] == ["cuda_graph_custom_mask"]
    assert "MineBackend" in rep.notes[0] and "TritonAttnBackend" in rep.notes[0]
    with pytest.raises(UsageError, match=r"unknown backend 'cuda' \(this install knows: mine"):
        analyse_buffers(texts, backend="cuda")
