"""ddprobe's import graph, read with `ast` (never by importing): what tests/test_layers.py checks
against its allow-list table and what .ci/health.py counts the cycles of.

A *package* is a sub-package of ddprobe (`bisect`, `hostside`, ...) or a top-level module
(`facts`, `store`, `entry`, `__init__`, ...): the first part of a module's path under ddprobe/.
An import is every `import ddprobe.X` / `from ddprobe.X import Y` / `from ddprobe import X`, at
the top of a module or inside a function (a lazy import still couples two layers); `from
ddprobe.X import Y` names the module X.Y when Y is a module, else X. Imports under
`if TYPE_CHECKING:` never run: the layer rules leave them out (`typing=False`), the cycle count
keeps them (a type-only import still makes two packages depend on each other's design).
"""
from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "ddprobe"


@dataclass(frozen=True)
class Import:
    line: int
    module: str  # as written: `from X import ...` -> X, `import X.Y` -> X.Y
    names: tuple[str, ...]  # `from X import a, b` -> (a, b); `import X` -> ()
    typing: bool  # under `if TYPE_CHECKING:`


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                lines.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    return lines


def imports(path: Path) -> list[Import]:
    """Every absolute import of a module, in source order."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing = _type_checking_lines(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(Import(node.lineno, node.module, tuple(a.name for a in node.names),
                              node.lineno in typing))
        elif isinstance(node, ast.Import):
            out += [Import(node.lineno, a.name, (), node.lineno in typing) for a in node.names]
    return sorted(out, key=lambda i: i.line)


def module_name(path: Path, root: Path = ROOT) -> str:
    """`ddprobe/bisect/planner.py` -> `ddprobe.bisect.planner`; a package's `__init__.py` is the
    package."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    """`ddprobe.bisect.planner` -> `bisect`, `ddprobe.facts` -> `facts`, `ddprobe` ->
    `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@cache
def modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _resolve(name: str, known: Mapping[str, Path]) -> str | None:
    while name not in known:
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]
    return name


def ddprobe_imports(path: Path, *, typing: bool, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, module imported) of the module's imports of ddprobe's own modules."""
    known = modules(root)
    pkg = root.name
    out = []
    for imp in imports(path):
        if imp.typing and not typing:
            continue
        if imp.module != pkg and not imp.module.startswith(pkg + "."):
            continue
        targets = [f"{imp.module}.{n}" if f"{imp.module}.{n}" in known else imp.module
                   for n in imp.names] or [imp.module]
        for t in dict.fromkeys(targets):
            got = _resolve(t, known)
            if got is not None and got != pkg:  # `from ddprobe import x` names x, never ddprobe
                out.append((imp.line, got))
    return out


def module_graph(*, typing: bool = True, root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the ddprobe modules it imports (itself left out)."""
    return {m: {t for _, t in ddprobe_imports(p, typing=typing, root=root) if t != m}
            for m, p in modules(root).items()}


def package_graph(*, typing: bool = True, root: Path = ROOT) -> dict[str, set[str]]:
    """package -> the other packages its modules import."""
    out: dict[str, set[str]] = {}
    for m, deps in module_graph(typing=typing, root=root).items():
        mine = package_of(m)
        out.setdefault(mine, set()).update(package_of(d) for d in deps
                                           if package_of(d) != mine)
    return out


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (each a cycle, or several
    sharing nodes), sorted; Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)
