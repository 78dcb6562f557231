"""SGLang's post-parse rules for speculative flags, found statically in an install's source.

The preflight (`server.preflight`) asks the host's SGLang itself. Where it cannot (the
interpreter lacks torch, which every release's server_args imports), these rules, read with
`ast` from `srt/server_args.py` and 0.5.2x's `srt/arg_groups/*_hook.py`, still predict the two
rewrites that silently change what a budget sweep runs:

  topk1         `if ... speculative_eagle_topk == 1 ...: speculative_num_draft_tokens =
                 speculative_num_steps + 1` (0.4.6.post5 .. 0.5.11 __post_init__; 0.5.2x
                 `declare_resolution(..., speculative_num_draft_tokens=cfg.speculative_num_steps
                 + 1)` in arg_groups/speculative_hook.py)
  steps_assert  `if ... speculative_num_steps is None: assert ... speculative_num_draft_tokens
                 is None` (start-up dies when draft tokens are given without steps)

plus where the parse entry point is (`prepare_server_args`) and whether resolution runs in
`resolve_once` (0.5.2x) rather than `__post_init__`. Every rule carries file:line and the
algorithms it applies to (the string constants of the enclosing `speculative_algorithm`
test; EAGLE-family when the source does not say, named as an assumption).
"""
from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddprobe.sources.pyparse import UNPARSABLE

EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
RULE_FILES = ("srt/server_args.py", "srt/arg_groups/speculative_hook.py")


@dataclass(frozen=True)
class Rule:
    kind: str  # entry | resolve | topk1 | steps_assert
    file: str
    line: int
    text: str = ""  # the statement, on one line
    algorithms: tuple[str, ...] = ()
    algorithms_assumed: bool = False

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def applies(self, algorithm: str | None) -> bool:
        return algorithm is not None and algorithm.upper() in self.algorithms


@dataclass(frozen=True)
class ArgRules:
    entry: Rule | None = None
    resolve: Rule | None = None
    topk1: Rule | None = None
    steps_assert: Rule | None = None

    def predict(self, asked: Mapping[str, Any], algorithm: str | None) -> tuple[str, str]:
        """("rejected" | "rewritten" | "", why) for the flags a launch asks for."""
        steps, topk, draft = asked.get("num_steps"), asked.get("topk"), asked.get(
            "draft_tokens")
        r = self.steps_assert
        if r is not None and r.applies(algorithm) and steps is None and draft is not None:
            return "rejected", (f"{r.where} asserts when --speculative-num-steps is unset but "
                                f"draft tokens are given: `{r.text}`")
        r = self.topk1
        if r is not None and r.applies(algorithm) and topk == 1 and steps is not None and \
                draft is not None and draft != steps + 1:
            return "rewritten", (f"{r.where} sets draft tokens to steps + 1 = {steps + 1} "
                                 f"when topk is 1 (asked {draft}): `{r.text}`")
        return "", ""


def find_rules(texts: Mapping[str, str]) -> ArgRules:
    """The rules in an install's sources ({path relative to the package: text})."""
    found: dict[str, Rule] = {}
    for path in sorted(texts):
        if not (path == RULE_FILES[0] or path.startswith("srt/arg_groups/")):
            continue
        try:
            tree = ast.parse(texts[path])
        except UNPARSABLE:
            continue
        _scan(path, tree, texts[path], found)
    return ArgRules(**{k: found.get(k) for k in ("entry", "resolve", "topk1",
                                                   "steps_assert")})


def _scan(path: str, tree: ast.Module, text: str, found: dict[str, Rule]) -> None:
    _scan_entry_points(path, tree, found)
    parents = _parents(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            _scan_if(path, node, text, parents, found)


def _scan_entry_points(path: str, tree: ast.Module, found: dict[str, Rule]) -> None:
    """`def prepare_server_args` and `ServerArgs.resolve_once` at the module's top level."""
    for st in tree.body:
        if isinstance(st, ast.FunctionDef) and st.name == "prepare_server_args":
            found.setdefault("entry", Rule("entry", path, st.lineno, "def prepare_server_args"))
        if isinstance(st, ast.ClassDef) and st.name == "ServerArgs":
            for sub in st.body:
                if isinstance(sub, ast.FunctionDef) and sub.name == "resolve_once":
                    found.setdefault("resolve", Rule("resolve", path, sub.lineno,
                                                     "ServerArgs.resolve_once"))


def _parents(tree: ast.Module) -> dict[ast.AST, ast.AST]:
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return parents


def _scan_if(path: str, node: ast.If, text: str, parents: Mapping[ast.AST, ast.AST],
             found: dict[str, Rule]) -> None:
    """The topk-1 rewrite and the steps assertion, each an `if` of the post-parse rules."""
    test = ast.unparse(node.test)
    body = ast.Module(body=node.body, type_ignores=[])
    if "speculative_eagle_topk == 1" in test and _sets_draft_to_steps_plus_one(body):
        found.setdefault("topk1", _rule("topk1", path, node, text, parents))
    if "speculative_num_steps is None" in test and any(
            isinstance(n, ast.Assert) and "speculative_num_draft_tokens is None" in
            ast.unparse(n.test) for n in ast.walk(body)):
        assert_node = next(n for n in ast.walk(body) if isinstance(n, ast.Assert))
        found.setdefault("steps_assert", _rule("steps_assert", path, assert_node, text,
                                               parents))


def _sets_draft_to_steps_plus_one(body: ast.Module) -> bool:
    for n in ast.walk(body):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Attribute) and t.attr == "speculative_num_draft_tokens" \
                        and "speculative_num_steps + 1" in ast.unparse(n.value):
                    return True
        if isinstance(n, ast.Call):
            for kw in n.keywords:
                if kw.arg == "speculative_num_draft_tokens" and \
                        "speculative_num_steps + 1" in ast.unparse(kw.value):
                    return True
    return False


def _rule(kind: str, path: str, node: ast.AST, text: str,
          parents: Mapping[ast.AST, ast.AST]) -> Rule:
    seg = ast.get_source_segment(text, node) or ast.unparse(node)
    first = " ".join(seg.split())
    if len(first) > 240:
        first = first[:237] + "..."
    algos: list[str] = []
    p = parents.get(node)
    while p is not None and not algos:
        if isinstance(p, ast.If) and "speculative_algorithm" in ast.unparse(p.test):
            algos = [c.value for c in ast.walk(p.test)
                     if isinstance(c, ast.Constant) and isinstance(c.value, str)]
        p = parents.get(p)
    if algos and "EAGLE" in algos and "NEXTN" not in algos:
        algos.append("NEXTN")  # NEXTN is renamed to EAGLE before these rules run
    return Rule(kind, path, getattr(node, "lineno", 0), first,
                tuple(algos) if algos else EAGLE_FAMILY, algorithms_assumed=not algos)
