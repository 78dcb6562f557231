"""Which attention-backend classes (and so which files) an `--attention-backend NAME` uses,
from the install's own source: the class hierarchy, not a name-to-file table.

Real backends subclass one another (`TRTLLMHAAttnBackend(FlashInferAttnBackend)`; a
`--backend X` whose class inherits another's graph buffers allocates them in the base
class's file). The classes a name creates are read from
  0.5.x  srt/layers/attention/attention_registry.py: `@register_attention_backend("NAME")`
         functions and the classes they return (every branch)
  0.4.x  srt/model_executor/model_runner.py: the `attention_backend == "NAME"` branch of
         `init_attention_backend` and the `...Backend(...)` classes it builds
and each class's bases are followed through srt/layers/attention/*.py. The draft backends
(`...MultiStepDraftBackend`) defined next to those classes come along with their files.

    files, notes = backend_files(texts, "flashinfer")
"""
from __future__ import annotations

import ast
from collections.abc import Mapping

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
        except SyntaxError:
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
            return found, [f"{MODEL_RUNNER}: attention_backend == {backend!r} creates "
                           f"{', '.join(found)}"]
    return [], [f"this install does not say which classes --attention-backend {backend} "
                f"creates (no {REGISTRY} entry, no branch in {MODEL_RUNNER})"]


def known_backends(texts: Mapping[str, str]) -> list[str]:
    """The names the install's registry (or model runner) accepts, as far as they are read."""
    names: list[str] = []
    for path in (REGISTRY, MODEL_RUNNER):
        try:
            tree = ast.parse(texts.get(path, ""))
        except SyntaxError:
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
    except SyntaxError:
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
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        if isinstance(test, ast.Compare) and "backend" in ast.unparse(test.left) \
                and any(isinstance(c, ast.Constant) and c.value == backend
                        for c in test.comparators):
            return _backend_calls(node.body)
    return []
