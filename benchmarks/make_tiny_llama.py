"""Make a tiny Llama model and a tokenizer, offline (no hub), for real-SGLang runs.

    python3 benchmarks/make_tiny_llama.py OUTDIR [--layers 2] [--hidden 256] [--seed 0]
    python3 benchmarks/make_tiny_llama.py OUTDIR --memorize 8 [--steps 1500]

The tokenizer is a byte-level BPE trained with the `tokenizers` library on a few lines of
code-like text, wrapped in transformers' PreTrainedTokenizerFast with a plain chat template;
the model is LlamaForCausalLM (bf16), saved with save_pretrained.

Without --memorize the weights are random: its answers are noise, and what a run on it can show
is crashes, capture failures, graph-vs-eager token equality under greedy decoding and acceptance
counts, not coding correctness (ddprobe's coding probes fail in every cell, graph and eager).

--memorize N trains the model (on the CPU, a few minutes) to answer the first N tasks of
ddprobe's bundled coding suite with each task's reference solution in a ```python fence, both
through the chat template (what /v1/chat/completions sends) and on the bare prompt (what
/generate sends), then checks greedy decoding in bf16 reproduces every answer with a logit
margin of at least --margin at each step. A server that runs this model correctly passes those
N coding probes; a server that computes wrong logits (a broken graph, mask or buffer) fails
them. It knows nothing but those N answers: it says nothing about real models' acceptance or
quality, and other prompts get noise.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for i in range(10):\n    print(i * i)\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n",
    "The quick brown fox jumps over the lazy dog. 0123456789 ()[]{}<>=+-*/%,.;:'\"",
    "Write a Python function that returns the sum of a list of integers.",
    "You are a helpful assistant. Answer with code only.",
]


def suite_pairs(n: int) -> list[tuple[str, str]]:
    """(prompt, answer) of the bundled coding suite's first n tasks; answer = fenced solution."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from ddprobe.probes.coding import load_suite
    return [(t.prompt, "```python\n" + t.solution + "```") for t in load_suite().tasks[:n]]


def _ids(x: Any) -> list[int]:
    """apply_chat_template's ids (a list, or a BatchEncoding in transformers 5)."""
    if isinstance(x, dict) or hasattr(x, "keys"):
        x = x["input_ids"]
    return [int(i) for i in x]


def train_memorize(model: Any, fast: Any, pairs: list[tuple[str, str]], *, steps: int,
                   lr: float, margin: float) -> tuple[int, float]:
    """Train on chat and bare-prompt forms of each pair until greedy bf16 reproduces them with
    the given margin; returns (steps run, smallest margin seen in the bf16 check)."""
    import torch

    seqs: list[tuple[list[int], list[int]]] = []
    for prompt, answer in pairs:
        ans = fast(answer, add_special_tokens=False)["input_ids"] + [fast.eos_token_id]
        chat = _ids(fast.apply_chat_template([{"role": "user", "content": prompt}],
                                             tokenize=True, add_generation_prompt=True))
        bare = fast(prompt)["input_ids"]
        seqs += [(chat, ans), (bare, ans)]
    width = max(len(p) + len(a) for p, a in seqs)
    ids = torch.full((len(seqs), width), fast.pad_token_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    att = torch.zeros_like(ids)
    for i, (p, a) in enumerate(seqs):
        row = p + a
        ids[i, :len(row)] = torch.tensor(row)
        labels[i, len(p):len(row)] = torch.tensor(a)
        att[i, :len(row)] = 1
    print(f"memorize: {len(pairs)} tasks, {len(seqs)} sequences, width {width}, "
          f"{int((labels >= 0).sum())} answer tokens", flush=True)
    model.float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps,
                                                pct_start=0.1)
    worst = float("-inf")
    step = 0
    for step in range(1, steps + 1):
        out = model(input_ids=ids, attention_mask=att, labels=labels)
        opt.zero_grad()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps:
            worst = bf16_margin(model, ids, att, labels)
            print(f"step {step}: loss {out.loss.item():.5f}, bf16 worst margin {worst:.2f}",
                  flush=True)
            if worst >= margin and step >= steps // 4:
                break
    return step, worst


def bf16_margin(model: Any, ids: Any, att: Any, labels: Any) -> float:
    """Smallest (target logit - best other logit) over all answer positions, in bf16
    (teacher-forced: equal to greedy decoding's margins while every step is right)."""
    import copy

    import torch
    m = copy.deepcopy(model).to(torch.bfloat16).eval()
    with torch.no_grad():
        logits = m(input_ids=ids, attention_mask=att).logits.float()[:, :-1]
    tgt = labels[:, 1:]
    mask = tgt >= 0
    t = tgt.clamp(min=0)
    right = logits.gather(-1, t.unsqueeze(-1)).squeeze(-1)
    other = logits.scatter(-1, t.unsqueeze(-1), float("-inf")).max(-1).values
    model.train()
    return float((right - other)[mask].min())


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--memorize", type=int, default=0, metavar="N",
                    help="train to answer the bundled coding suite's first N tasks")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--margin", type=float, default=4.0,
                    help="smallest bf16 logit margin to accept (--memorize)")
    a = ap.parse_args(argv)

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    pairs = suite_pairs(a.memorize) if a.memorize else []
    corpus = CORPUS * 20 + [t for p in pairs for t in p] * 20
    special = ["<unk>", "<s>", "</s>", "<pad>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=a.vocab, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer=trainer)
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
    model = LlamaForCausalLM(cfg)
    if pairs:
        torch.set_num_threads(max(1, torch.get_num_threads()))
        steps, worst = train_memorize(model, fast, pairs, steps=a.steps, lr=a.lr,
                                      margin=a.margin)
        if worst < a.margin:
            print(f"memorize: bf16 margin {worst:.2f} < {a.margin} after {steps} steps: "
                  "not saved", file=sys.stderr)
            return 1
    model = model.to(torch.bfloat16)
    model.save_pretrained(a.out)
    print(f"tiny llama: {sum(p.numel() for p in model.parameters())} params, "
          f"vocab {len(fast)}, layers {a.layers}, hidden {a.hidden}"
          f"{f', memorized {len(pairs)} coding tasks' if pairs else ''} -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
