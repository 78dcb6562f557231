"""Which attention-backend classes (and so which files) an `--attention-backend NAME` uses,
from the install's own source: the class hierarchy, not a name-to-file table.

Real backends subclass one another (`TRTLLMHAAttnBackend(FlashInferAttnBackend)`; a
`--backend X` whose class inherits another's graph buffers allocates them in the base
class's file). The classes a name creates are read from
  0.5.x  srt/layers/attention/attention_registry.py: `@register_attention_backend("NAME")`
         functions and the classes they return (every branch)
  0.4.x  srt/model_executor/model_runner.py: the branch of the if/elif/else chain on the
         backend's name (or a local holding it) that NAME takes, a final `else` included,
         and the `...Backend(...)` classes it builds (the testbed chooses there too)
and each class's bases are followed through srt/layers/attention/*.py. The draft backends
(`...MultiStepDraftBackend`) defined next to those classes come along with their files.

    files, notes = backend_files(texts, "flashinfer")
"""
from __future__ import annotations

import ast
from collections.abc import Mapping

from ddprobe.sources.pyparse import UNPARSABLE

ATTN = "srt/layers/attention"
REGISTRY = f"{ATTN}/attention_registry.py"
MODEL_RUNNER = "srt/model_executor/model_runner.py"


def backend_files(texts: Mapping[str, str], backend: str) -> tuple[list[str], list[str]]:
    """(the files defining the backend's classes and their bases, notes); ([], notes) when
    the install does not say which classes the name creates."""
    index = class_index(texts)
    classes, notes = creates(texts, backend)
    if not classes:
        return [], notes
    files: list[str] = []
    chain: list[str] = []
    todo = list(classes)
    seen: set[str] = set()
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        if name not in index:
            if name not in ("AttentionBackend", "object", "ABC"):
                notes.append(f"class {name} is not defined under {ATTN}/ in this install")
            continue
        path, bases = index[name]
        chain.append(f"{name} ({path})")
        if path not in files:
            files.append(path)
        todo.extend(bases)
    notes.insert(0, f"--attention-backend {backend}: " + " -> ".join(chain))
    return files, notes


def class_index(texts: Mapping[str, str]) -> dict[str, tuple[str, list[str]]]:
    """class name -> (file, base class names) over srt/layers/attention/*.py."""
    out: dict[str, tuple[str, list[str]]] = {}
    for path in sorted(texts):
        if not path.startswith(ATTN + "/") or not path.endswith(".py"):
            continue
        try:
            tree = ast.parse(texts[path])
        except UNPARSABLE:
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else b.attr
                         for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))]
                out.setdefault(node.name, (path, bases))
    return out


def creates(texts: Mapping[str, str], backend: str) -> tuple[list[str], list[str]]:
    """The backend classes `--attention-backend backend` constructs, and how that was read."""
    if REGISTRY in texts:
        found = _from_registry(texts[REGISTRY], backend)
        if found is not None:
            return found, [f"{REGISTRY}: @register_attention_backend({backend!r}) creates "
                           f"{', '.join(found) or 'no class'}"]
    if MODEL_RUNNER in texts:
        found = _from_model_runner(texts[MODEL_RUNNER], backend)
        if found:
            return found, [f"{MODEL_RUNNER}: the branch --attention-backend {backend} "
                           f"takes creates {', '.join(found)}"]
    return [], [f"this install does not say which classes --attention-backend {backend} "
                f"creates (no {REGISTRY} entry, no branch in {MODEL_RUNNER})"]


def known_backends(texts: Mapping[str, str]) -> list[str]:
    """The names the install's registry (or model runner) accepts, as far as they are read."""
    names: list[str] = []
    for path in (REGISTRY, MODEL_RUNNER):
        try:
            tree = ast.parse(texts.get(path, ""))
        except UNPARSABLE:
            continue
        for n in ast.walk(tree):
            if path == REGISTRY and isinstance(n, ast.Call) and n.args and isinstance(
                    n.func, ast.Name) and n.func.id == "register_attention_backend" and \
                    isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
                names.append(n.args[0].value)
            if path == MODEL_RUNNER and isinstance(n, ast.Compare) and \
                    "backend" in ast.unparse(n.left):
                names += [c.value for c in n.comparators
                          if isinstance(c, ast.Constant) and isinstance(c.value, str)]
        if names:
            break
    return sorted(set(names))


def _backend_calls(nodes: list[ast.stmt]) -> list[str]:
    out: list[str] = []
    for n in ast.walk(ast.Module(body=nodes, type_ignores=[])):
        if isinstance(n, ast.Call):
            name = n.func.id if isinstance(n.func, ast.Name) else (
                n.func.attr if isinstance(n.func, ast.Attribute) else "")
            if name.endswith("Backend") and name[:1].isupper() and name not in out:
                out.append(name)
    return out


def _from_registry(text: str, backend: str) -> list[str] | None:
    try:
        tree = ast.parse(text)
    except UNPARSABLE:
        return None
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for d in node.decorator_list:
            if isinstance(d, ast.Call) and d.args and isinstance(d.args[0], ast.Constant) \
                    and d.args[0].value == backend:
                return _backend_calls(node.body)
    return None


def _from_model_runner(text: str, backend: str) -> list[str]:
    """The classes the model runner builds for `backend`: its `if/elif/else` chain on the
    backend name (or on a local holding it: `name = self.server_args.attention_backend or
    "triton"`), followed to the branch the name takes, the final `else` included (the
    testbed's `else: TorchNativeAttnBackend(self)`)."""
    try:
        tree = ast.parse(text)
    except UNPARSABLE:
        return []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = _backend_names(fn)
        inner: set[int] = set()
        for node in ast.walk(fn):
            if not isinstance(node, ast.If) or id(node) in inner:
                continue
            if _matches(node.test, names, backend) is None:
                continue
            inner.update(id(n) for n in ast.walk(node) if n is not node)
            found = _branch(node, names, backend)
            if found:
                return found
    return []


def _backend_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Locals and parameters that hold the backend's name in this function."""
    out = {a.arg for a in fn.args.args if "backend" in a.arg}
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and "attention_backend" in ast.unparse(n.value):
            out.update(t.id for t in n.targets if isinstance(t, ast.Name))
    return out


def _matches(test: ast.expr, names: set[str], backend: str) -> bool | None:
    """Whether `backend` takes this branch; None when the test is not about the name."""
    if isinstance(test, ast.BoolOp):
        got = [_matches(v, names, backend) for v in test.values]
        known = [g for g in got if g is not None]
        if not known:
            return None
        return any(known) if isinstance(test.op, ast.Or) else all(known)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left = test.left
    if not ((isinstance(left, ast.Name) and left.id in names) or "backend" in ast.unparse(left)):
        return None
    vals = _constants(test.comparators[0])
    if vals is None:
        return None
    op = test.ops[0]
    if isinstance(op, (ast.Eq, ast.In)):
        return backend in vals
    if isinstance(op, (ast.NotEq, ast.NotIn)):
        return backend not in vals
    return None


def _constants(node: ast.expr) -> list[str] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [str(e.value) for e in node.elts if isinstance(e, ast.Constant)]
    return None


def _branch(node: ast.If, names: set[str], backend: str) -> list[str]:
    """Follow an if/elif/else chain to the branch `backend` takes."""
    cur: ast.If | None = node
    while cur is not None:
        m = _matches(cur.test, names, backend)
        if m:
            return _backend_calls(cur.body)
        orelse = cur.orelse
        if len(orelse) == 1 and isinstance(orelse[0], ast.If) and \
                _matches(orelse[0].test, names, backend) is not None:
            cur = orelse[0]
            continue
        return _backend_calls(orelse) if (m is False and orelse) else []
    return []
