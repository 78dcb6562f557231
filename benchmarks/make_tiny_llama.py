"""Make a tiny random-weight Llama model and a tokenizer, offline (no hub), for real-SGLang runs.

    python3 benchmarks/make_tiny_llama.py OUTDIR [--layers 2] [--hidden 256] [--seed 0]

The tokenizer is a byte-level BPE trained with the `tokenizers` library on a few lines of
code-like text, wrapped in transformers' PreTrainedTokenizerFast with a plain chat template;
the model is LlamaForCausalLM with random weights (bf16), saved with save_pretrained. Its
answers are noise: what a run on it can show is crashes, capture failures, graph-vs-eager
token equality under greedy decoding and acceptance counts, not coding correctness.
"""
from __future__ import annotations

import argparse
import sys

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for i in range(10):\n    print(i * i)\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n",
    "The quick brown fox jumps over the lazy dog. 0123456789 ()[]{}<>=+-*/%,.;:'\"",
    "Write a Python function that returns the sum of a list of integers.",
    "You are a helpful assistant. Answer with code only.",
]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    special = ["<unk>", "<s>", "</s>", "<pad>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=a.vocab, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="<pad>")
    fast.chat_template = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n"
                          "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")
    fast.model_max_length = a.context
    fast.save_pretrained(a.out)

    torch.manual_seed(a.seed)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=a.hidden, intermediate_size=a.hidden * 2,
                      num_hidden_layers=a.layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=a.context, rms_norm_eps=1e-5,
                      bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                      pad_token_id=fast.pad_token_id, tie_word_embeddings=False,
                      torch_dtype="bfloat16")
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(a.out)
    print(f"tiny llama: {sum(p.numel() for p in model.parameters())} params, "
          f"vocab {len(fast)}, layers {a.layers}, hidden {a.hidden} -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
