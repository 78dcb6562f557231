"""Model configs of the simulated target and drafter."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    path: str
    context_len: int
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    head_dim: int = 128
    dtype: str = "torch.bfloat16"
    model_type: str = "kimi_k2"
    architectures: tuple[str, ...] = ("DeepseekV3ForCausalLM",)


@dataclass(frozen=True)
class DraftModelConfig:
    path: str | None
    # The verify width the drafter ships as its default (a DDTree/DFlash drafter's block);
    # None when the drafter has no opinion and the server's setting is used.
    num_draft_tokens: int | None
    accuracy: float
    decay: float
