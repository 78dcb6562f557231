"""What the testbed's model "knows": the coding-probe tasks with their solutions, and generic text.

The coding suite is ddprobe's probe data (`ddprobe/probes/suites/coding.json`); the installer
copies it to `ddtestbed/data/coding.json`. It is read, never duplicated in this package.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

_PKG = Path(__file__).resolve().parent
SUITE_ENV = "DDTESTBED_SUITE"


@dataclass(frozen=True)
class Task:
    id: str
    prompt: str  # matched (stripped) as a substring of the prompt text
    answer: str  # the chat answer: the solution in a python code fence


def suite_path() -> Path | None:
    """$DDTESTBED_SUITE, else the installed copy, else the in-tree suite (running from a checkout)."""
    env = os.environ.get(SUITE_ENV)
    if env:
        return Path(env)
    in_tree = _PKG.parent / "ddprobe" / "probes" / "suites" / "coding.json"
    for candidate in (_PKG / "data" / "coding.json", in_tree):
        if candidate.is_file():
            return candidate
    return None


def load_tasks(path: Path | None) -> list[Task]:
    if path is None:
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read the coding suite: {e}") from None
    tasks = doc.get("tasks") if isinstance(doc, dict) else None
    if not isinstance(tasks, list):
        raise ValueError(f"{path}: the coding suite has no 'tasks' list")
    out = []
    for i, t in enumerate(tasks):
        if not isinstance(t, dict) or not isinstance(t.get("prompt"), str) \
                or not isinstance(t.get("solution"), str):
            raise ValueError(f"{path}: task #{i} needs string 'prompt' and 'solution'")
        out.append(Task(id=str(t.get("id", i)), prompt=t["prompt"].strip(),
                        answer="```python\n" + t["solution"] + "\n```"))
    return out


# Continuation text for prompts the model has no answer for. Its 4-token contexts are mostly
# unique, so continuing from any point keeps producing fluent sentences.
GENERIC_CORPUS = (
    "The quick survey of the system begins with the scheduler, which keeps a queue of waiting "
    "requests and admits them when memory allows. Each admitted request is prefilled once; "
    "after that every decoding step proposes a small tree of draft tokens and verifies the "
    "whole tree in a single forward pass of the target model. Accepted tokens are appended to "
    "the output, and the first disagreement ends the step with one bonus token from the "
    "target. When the drafter agrees often, several tokens arrive per step and throughput "
    "rises; when it rarely agrees, the server still produces correct text, only more slowly. "
    "Engineers who operate these servers watch three numbers: acceptance length, tokens per "
    "second, and the share of requests that finish without errors. A sudden drop in any of "
    "them usually points to a configuration change, a new driver, or a different GPU. Good "
    "practice is to change one setting at a time, to record every run, and to keep a baseline "
    "that can be restored within minutes. Careful notes turn a long night of guessing into a "
    "short list of experiments with clear outcomes.\n\n"
)

GENERIC_REPLIES = (
    "Sure. Here is a short overview: start from a configuration that is known to work, change "
    "one setting at a time, and measure both correctness and speed after each change. Keep "
    "the logs of every run so that a regression can be traced back to its cause.",
    "That depends on the workload. For short prompts the decoding speed dominates, so a larger "
    "draft tree often helps; for long prompts the prefill dominates, and the tree size matters "
    "less. Measure with your own traffic before deciding.",
    "I can help with that. The simplest approach is to write a small test first, run it "
    "against the current version, and then make the change. If the test still passes, the "
    "change is probably safe to keep.",
    "Here is what I would check first: the server logs for errors, the acceptance length of "
    "speculative decoding, and the throughput compared with yesterday. Most problems show up "
    "in one of those three places.",
)
