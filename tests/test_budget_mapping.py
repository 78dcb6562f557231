"""How a budget becomes flags per host: server.budget_flag (draft_tokens, ddtree, steps) or a
host's own server.budget_args template, validated with file:line errors."""
from __future__ import annotations

from pathlib import Path

import pytest

from ddprobe.errors import ConfigError
from ddprobe.inventory import load_inventory
from ddprobe.results import Config
from ddprobe.server.launch import budget_fields, server_args

HEAD = "hosts:\n  gpu:\n    host: h\n    server:\n      model_path: m\n"


def _host(tmp: Path, server: str):
    p = tmp / "hosts.yaml"
    p.write_text(HEAD + server)
    return load_inventory(str(p)).get("gpu")


@pytest.mark.parametrize("server,words,fields", [
    ("      algorithm: EAGLE\n      steps: 3\n      topk: 4\n",
     ["--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
      "--speculative-num-draft-tokens", "17"], ("draft_tokens",)),
    ("      algorithm: DDTREE\n      budget_flag: ddtree\n",
     ["--speculative-ddtree-budget", "16"], ("tree_budget",)),
    ("      algorithm: EAGLE\n      budget_flag: steps\n      steps: 3\n      topk: 1\n",
     ["--speculative-eagle-topk", "1", "--speculative-num-steps", "16",
      "--speculative-num-draft-tokens", "17"], ("num_steps", "draft_tokens")),
    ("      algorithm: NGRAM\n      budget_args: [--speculative-num-draft-tokens, "
     "'{draft_tokens}', --speculative-ngram-max-bfs-breadth, '1']\n",
     ["--speculative-num-draft-tokens", "17", "--speculative-ngram-max-bfs-breadth", "1"],
     ("draft_tokens",)),
])
def test_mappings(tmp_path: Path, server: str, words: list[str], fields: tuple) -> None:
    h = _host(tmp_path, server)
    argv = server_args(h, Config(budget=16))
    i = argv.index(words[0])
    assert argv[i:i + len(words)] == words, argv
    assert argv.count("--speculative-num-steps") <= 1
    assert budget_fields(h) == fields


@pytest.mark.parametrize("server,msg", [
    ("      budget_flag: chain\n", "must be draft_tokens, ddtree or steps, got 'chain'"),
    ("      budget_args: [--x, '{budgett}']\n", "unknown placeholder {budgett}"),
    ("      budget_args: [--x, '8']\n", "never uses the budget"),
    ("      budget_args: ['{budget}']\n", "must start with a flag"),
    ("      budget_args: --x\n", "must be a list"),
])
def test_bad_mappings_name_file_and_line(tmp_path: Path, server: str, msg: str) -> None:
    with pytest.raises(ConfigError) as e:
        _host(tmp_path, server)
    text = str(e.value)
    assert msg in text and text.startswith(f"{tmp_path / 'hosts.yaml'}:")
    assert text.split(":")[1] in ("5", "6")  # the server block or the key's own line
