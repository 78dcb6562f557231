"""Find buffer allocations in Python source with `ast` (never importing it).

One pass over a module gives, per class/function scope:
- allocation sites (`torch.zeros/empty/full/ones/arange/*_like`, `x.new_zeros`...), with the name
  they are stored under (`self.cuda_graph_custom_mask`, a local, a dict key, a keyword field);
- sites that set an attribute to None (the seed's confusion: `self.cuda_graph_custom_mask = None`
  in `__init__` while the real allocation is in `init_cuda_graph_state`);
- the plain assignments needed to resolve sizing names later (locals, `self.x = ...`).

The allocator is recognised by spelling (`torch.<fn>` or a name imported from torch), so a
package whose allocator is a shim imported as `torch` is analysed the same way.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TypeGuard

from ddprobe.sources.pyparse import UNPARSABLE, why

ALLOCATORS = frozenset({"zeros", "empty", "ones", "full", "arange", "zeros_like", "empty_like",
                        "ones_like", "full_like", "empty_strided"})
NEW_METHODS = frozenset({"new_zeros", "new_empty", "new_ones", "new_full"})
# Calls that hand back the same storage (or a view); an allocation seen through them keeps its
# owner: `torch.zeros(n).to(dev)` is still the buffer stored in the assignment target.
_PASS_THROUGH = frozenset({"to", "cuda", "contiguous", "view", "reshape", "pin_memory", "fill_",
                           "zero_", "share_memory_", "requires_grad_", "int", "long", "bool"})


class _Site:
    """A site in the source: `target` assigned in `cls.func` (mixin for the site records)."""

    target: str
    cls: str | None
    func: str | None

    @property
    def attr(self) -> str:
        """The short name: `self.` stripped."""
        return self.target[5:] if self.target.startswith("self.") else self.target

    @property
    def scope(self) -> str:
        return ".".join(p for p in (self.cls, self.func) if p) or "<module>"

    @property
    def is_local(self) -> bool:
        """A bare name (`x = ...` in a function): never the attribute `self.x`."""
        return self.target.isidentifier()

    def same_storage(self, target: str, func: str | None) -> bool:
        """Whether this site writes what `target` (as stored, in `func`) names: an attribute
        matches an attribute of that name; a local only the same local in the same function."""
        local = target.isidentifier()
        if local != self.is_local:
            return False
        return not local or func == self.func


@dataclass(frozen=True)
class Alloc(_Site):
    """One allocation site."""

    target: str  # as stored: "self.cuda_graph_custom_mask", "custom_mask", 'self.meta["k"]'
    file: str
    line: int
    end_line: int
    cls: str | None
    func: str | None
    allocator: str  # "torch.zeros", "x.new_zeros"
    shape: str  # the size expression as written (ast.unparse)
    shape_span: tuple[int, int, int, int] | None  # lineno, col, end_lineno, end_col (1-based lines)
    shape_kind: str  # "dims" (tuple/list/varargs/scalar) | "like" | "arange" | "unknown"
    dtype: str | None
    conditions: tuple[str, ...]  # enclosing `if` tests, innermost last
    shape_node: ast.expr | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class NoneSite(_Site):
    target: str
    file: str
    line: int
    cls: str | None
    func: str | None


@dataclass(frozen=True)
class Assignment:
    """A plain (non-allocation) assignment, kept for resolving sizing names."""

    target: str  # "max_num_tokens" or "self.max_context_len"
    value: ast.expr
    line: int
    cls: str | None
    func: str | None
    conditional: bool  # inside an if/for/while/try of its function


@dataclass(frozen=True)
class CallSite:
    file: str
    line: int
    nargs: int  # positional arguments
    keywords: tuple[str, ...]
    scope: str
    # what the caller passes (for sizes resolved from the caller, not a parameter's name)
    args: tuple[ast.expr, ...] = field(default=(), compare=False, repr=False)
    kwargs: tuple[tuple[str, ast.expr], ...] = field(default=(), compare=False, repr=False)
    cls: str | None = None
    func: str | None = None
    receiver: str = ""  # `self.model_runner.attn_backend` of `....init_cuda_graph_state(...)`


@dataclass
class FuncInfo:
    cls: str | None
    name: str
    node: ast.FunctionDef | ast.AsyncFunctionDef
    params: tuple[str, ...]
    locals: dict[str, list[Assignment]] = field(default_factory=dict)
    name_loads: list[ast.Name] = field(default_factory=list)  # for alias lookups


@dataclass
class ModuleScan:
    file: str
    tree: ast.Module | None
    error: str | None = None
    allocs: list[Alloc] = field(default_factory=list)
    none_sites: list[NoneSite] = field(default_factory=list)
    # class name -> attr -> assignments of `self.attr` (anywhere in the class)
    class_attrs: dict[str, dict[str, list[Assignment]]] = field(default_factory=dict)
    funcs: dict[tuple[str | None, str], FuncInfo] = field(default_factory=dict)
    module_consts: dict[str, ast.expr] = field(default_factory=dict)
    parents: dict[int, ast.AST] = field(default_factory=dict)
    # (class, attr) -> loads of `self.attr` with the function they are in
    self_refs: dict[tuple[str | None, str], list[tuple[FuncInfo, ast.Attribute]]] = field(
        default_factory=dict)
    calls: dict[str, list[CallSite]] = field(default_factory=dict)  # callee name -> sites
    cache: dict[str, object] = field(default_factory=dict)  # derived indexes, built lazily


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """Module statements, including those inside top-level if/try blocks (guarded imports)."""
    out: list[ast.stmt] = []
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        st = stack.pop()
        out.append(st)
        if isinstance(st, (ast.If, ast.Try)):
            stack.extend(st.body + st.orelse + getattr(st, "finalbody", []))
            for h in getattr(st, "handlers", []):
                stack.extend(h.body)
    return out


def _torch_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Module aliases of torch (`import torch as T`) and allocator names imported from it."""
    mods, fns = {"torch"}, set()
    for node in _top_level(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch" or a.name.endswith(".torch"):
                    mods.add(a.asname or a.name.split(".")[-1])
        elif isinstance(node, ast.ImportFrom) and node.module and (
                node.module == "torch" or node.module.endswith(".torch")):
            for a in node.names:
                if a.name in ALLOCATORS:
                    fns.add(a.asname or a.name)
    return mods, fns


def allocator_name(call: ast.Call, mods: set[str], fns: set[str]) -> str | None:
    f = call.func
    if isinstance(f, ast.Attribute):
        if f.attr in ALLOCATORS and isinstance(f.value, ast.Name) and f.value.id in mods:
            return f"{f.value.id}.{f.attr}"
        if f.attr in NEW_METHODS:
            return f"{ast.unparse(f.value)}.{f.attr}"
    elif isinstance(f, ast.Name) and f.id in fns:
        return f.id
    return None


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def _span(node: ast.AST) -> tuple[int, int, int, int] | None:
    end_line = getattr(node, "end_lineno", None)
    end_col = getattr(node, "end_col_offset", None)
    if end_line is None or end_col is None:
        return None
    return (node.lineno, node.col_offset, end_line, end_col)  # type: ignore[attr-defined]


def shape_of(call: ast.Call, allocator: str) -> tuple[ast.expr | None, str]:
    """The size expression of an allocation and its kind."""
    fn = allocator.rsplit(".", 1)[-1]
    if fn.endswith("_like"):
        return (call.args[0] if call.args else None), "like"
    if fn == "arange":
        if not call.args:
            end = _kw(call, "end")
            return end, "arange" if end is not None else "unknown"
        if len(call.args) == 1:
            return call.args[0], "arange"
        return ast.Tuple(elts=list(call.args[:3]), ctx=ast.Load()), "arange"
    size = _kw(call, "size")
    if size is not None:
        return size, "dims"
    if not call.args:
        return None, "unknown"
    if fn in ("full", "new_full", "empty_strided"):
        return call.args[0], "dims"
    if len(call.args) == 1:
        return call.args[0], "dims"
    # varargs: torch.zeros(a, b, c)
    node = ast.Tuple(elts=list(call.args), ctx=ast.Load())
    ast.copy_location(node, call.args[0])
    last = call.args[-1]
    node.end_lineno, node.end_col_offset = last.end_lineno, last.end_col_offset
    return node, "dims"


def _target_text(t: ast.expr) -> str:
    return ast.unparse(t)


def owner_of(call: ast.Call, parents: dict[int, ast.AST]) -> str | None:
    """The name an allocation is stored under, climbing through wrappers.

    `self.x = torch.zeros(...)` -> self.x; `d = {"k": torch.zeros(...)}` -> d["k"];
    `S(buf=torch.zeros(...))` assigned to s -> s.buf; returned -> "return"."""
    suffix = ""
    node: ast.AST = call
    while True:
        parent = parents.get(id(node))
        if parent is None:
            return None
        step = _owner_step(parent, node, suffix, parents)
        if not isinstance(step, tuple):
            return step
        node, suffix = step


# one step of owner_of: (the node to climb from, the suffix so far), or the owner (a str), or
# None when the allocation has no owner (a temporary)
_Step = tuple[ast.AST, str] | str | None


def _owner_step(parent: ast.AST, node: ast.AST, suffix: str, parents: dict[int, ast.AST]
                ) -> _Step:
    if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        target = _assigned_target(parent, node)
        return None if target is None else target + suffix
    if isinstance(parent, ast.Return):
        return "return" + suffix
    if isinstance(parent, ast.keyword) and parent.arg:
        # `S(buf=torch.zeros(...))`: the field of what the call builds
        up = parents.get(id(parent), parent)
        return (up, f".{parent.arg}" + suffix) if isinstance(up, ast.Call) else None
    if isinstance(parent, ast.Dict):
        return parent, _dict_key(parent, node) + suffix
    if isinstance(parent, ast.Call) and node is not parent.func and not (
            isinstance(parent.func, ast.Attribute) and parent.func.value is node):
        # an argument of some other call (e.g. a kernel launch): a temporary, no owner
        return None
    if isinstance(parent, ast.Attribute) and parent.attr not in _PASS_THROUGH:
        return None
    if isinstance(parent, ast.expr):  # a wrapper: `(a or torch.zeros(...)).to(dev)`, ...
        return parent, suffix
    return None


def _assigned_target(parent: ast.Assign | ast.AnnAssign | ast.AugAssign, node: ast.AST
                     ) -> str | None:
    targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
    t = targets[0]
    if isinstance(t, ast.Subscript) and not isinstance(t.slice, ast.Constant):
        return None  # a write into an existing buffer (`buf[:n] = ...`): a temporary
    if isinstance(t, (ast.Tuple, ast.List)) and isinstance(node, (ast.Tuple, ast.List)) \
            and node is parent.value and len(t.elts) == len(node.elts):
        return None  # tuple-unpack of several allocations: handled by caller
    return _target_text(t)


def _dict_key(d: ast.Dict, node: ast.AST) -> str:
    """`[key]` for the value `node` of a dict display (every key it is stored under)."""
    out = ""
    for k, v in zip(d.keys, d.values, strict=True):
        if v is node and k is not None:
            out = f"[{ast.unparse(k)}]" + out
    return out


def _conditions(node: ast.AST, func: ast.AST, parents: dict[int, ast.AST]) -> tuple[str, ...]:
    conds: list[str] = []
    child, p = node, parents.get(id(node))
    while p is not None and p is not func:
        if isinstance(p, ast.If):
            test = ast.unparse(p.test)
            if child in p.orelse:
                conds.append(f"not ({test})")
            elif child in p.body:
                conds.append(test)
        elif isinstance(p, ast.IfExp):
            test = ast.unparse(p.test)
            if child is p.orelse:
                conds.append(f"not ({test})")
            elif child is p.body:
                conds.append(test)
        child, p = p, parents.get(id(p))
    return tuple(reversed(conds))


def _is_conditional(node: ast.AST, func: ast.AST, parents: dict[int, ast.AST]) -> bool:
    p = parents.get(id(node))
    while p is not None and p is not func:
        if isinstance(p, (ast.If, ast.For, ast.While, ast.Try, ast.With)) and not isinstance(
                p, ast.With):
            return True
        p = parents.get(id(p))
    return False


def scan_module(file: str, text: str, only: frozenset[str] | None = None) -> ModuleScan:
    """Scan one module's text. A syntax error gives a scan with `error` set, never a crash.

    `only`: walk just these top-level functions/classes (a helper module read because the
    backends call something in it; the rest of it is not about graph buffers)."""
    try:
        tree = ast.parse(text, filename=file)
    except UNPARSABLE as e:
        return ModuleScan(file=file, tree=None, error=f"cannot parse: {why(e)}")
    scan = ModuleScan(file=file, tree=tree)
    mods, fns = _torch_names(tree)
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(
                stmt.targets[0], ast.Name):
            scan.module_consts[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
            scan.module_consts[stmt.target.id] = stmt.value
    root: ast.AST = tree
    if only is not None:
        root = ast.Module(body=[s for s in tree.body if not isinstance(
            s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or s.name in only],
            type_ignores=[])
    _walk_scopes(scan, root, None, None, mods, fns)
    # the walk is iterative (not in source order): order every record by line, since
    # resolution takes "the last assignment before this line"
    scan.allocs.sort(key=lambda a: (a.line, a.shape_span or (0, 0, 0, 0)))
    scan.none_sites.sort(key=lambda n: n.line)
    for info in scan.funcs.values():
        for assigns in info.locals.values():
            assigns.sort(key=lambda a: a.line)
    for attrs in scan.class_attrs.values():
        for assigns in attrs.values():
            assigns.sort(key=lambda a: a.line)
    for sites in scan.calls.values():
        sites.sort(key=lambda c: c.line)
    scan.funcs = dict(sorted(scan.funcs.items(), key=lambda kv: kv[1].node.lineno))
    return scan


# Children that carry nothing for this analysis: skipping them saves a third of the walk.
_SKIP = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop, ast.Constant,
         ast.alias, ast.arguments)


def _walk_scopes(scan: ModuleScan, root: ast.AST, cls0: str | None, func0: FuncInfo | None,
                 mods: set[str], fns: set[str]) -> None:
    """One iterative pass over the tree (it is the hot loop: ~100k nodes for a big release)."""
    parents = scan.parents
    self_refs = scan.self_refs
    stack: list[tuple[ast.AST, str | None, FuncInfo | None]] = [(root, cls0, func0)]
    while stack:
        node, cls, func = stack.pop()
        for fname in node._fields:
            value = getattr(node, fname, None)
            if isinstance(value, list):
                children = value
            elif isinstance(value, ast.AST):
                children = [value]
            else:
                continue
            for child in children:
                if not isinstance(child, ast.AST) or isinstance(child, _SKIP):
                    continue
                parents[id(child)] = node
                if isinstance(child, ast.ClassDef):
                    scan.class_attrs.setdefault(child.name, {})
                    stack.append((child, child.name, None))
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    a = child.args
                    params = tuple(x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs])
                    name = child.name if func is None else f"{func.name}.{child.name}"
                    info = FuncInfo(cls=cls, name=name, node=child, params=params)
                    scan.funcs[(cls, name)] = info
                    stack.append((child, cls, info))
                else:
                    if func is not None:
                        if isinstance(child, ast.Name):
                            if isinstance(child.ctx, ast.Load):
                                func.name_loads.append(child)
                            continue  # a Name has no children worth visiting
                        if isinstance(child, ast.Attribute) and isinstance(
                                child.value, ast.Name) and child.value.id == "self":
                            parents[id(child.value)] = child
                            if isinstance(child.ctx, ast.Load):
                                self_refs.setdefault((cls, child.attr), []).append(
                                    (func, child))
                            continue
                        _visit_stmt_node(scan, child, cls, func, mods, fns)
                    stack.append((child, cls, func))


def _visit_stmt_node(scan: ModuleScan, node: ast.AST, cls: str | None, func: FuncInfo,
                     mods: set[str], fns: set[str]) -> None:
    if isinstance(node, ast.Call):
        _record_call(scan, node, cls, func)
        alloc = allocator_name(node, mods, fns)
        if alloc is not None:
            _record_alloc(scan, node, alloc, cls, func)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            _record_assignment(scan, node, t, node.value, cls, func)


def _record_call(scan: ModuleScan, node: ast.Call, cls: str | None, func: FuncInfo) -> None:
    callee = node.func.attr if isinstance(node.func, ast.Attribute) else (
        node.func.id if isinstance(node.func, ast.Name) else None)
    if not callee:
        return
    scan.calls.setdefault(callee, []).append(CallSite(
        scan.file, node.lineno, len(node.args),
        tuple(k.arg for k in node.keywords if k.arg),
        ".".join(p for p in (cls, func.name) if p),
        args=tuple(node.args), kwargs=tuple((k.arg, k.value) for k in node.keywords if k.arg),
        cls=cls, func=func.name,
        receiver=ast.unparse(node.func.value) if isinstance(node.func, ast.Attribute) else ""))


def _record_alloc(scan: ModuleScan, node: ast.Call, alloc: str, cls: str | None,
                  func: FuncInfo) -> None:
    owner = owner_of(node, scan.parents)
    if owner is None:
        return
    shape, kind = shape_of(node, alloc)
    dtype = _kw(node, "dtype")
    scan.allocs.append(Alloc(
        target=owner, file=scan.file, line=node.lineno,
        end_line=getattr(node, "end_lineno", node.lineno) or node.lineno,
        cls=cls, func=func.name, allocator=alloc,
        shape=ast.unparse(shape) if shape is not None else "?",
        shape_span=_span(shape) if shape is not None and kind == "dims" else None,
        shape_kind=kind, dtype=ast.unparse(dtype) if dtype is not None else None,
        conditions=_conditions(node, func.node, scan.parents), shape_node=shape))


def _record_assignment(scan: ModuleScan, node: ast.Assign | ast.AnnAssign, t: ast.expr,
                       value: ast.expr, cls: str | None, func: FuncInfo) -> None:
    """`x = None` sites, locals, and `self.attr = ...` of the class (for sizing names)."""
    if isinstance(value, ast.Constant) and value.value is None:
        if isinstance(t, (ast.Attribute, ast.Name, ast.Subscript)):
            text = t.id if isinstance(t, ast.Name) else _target_text(t)
            scan.none_sites.append(NoneSite(text, scan.file, node.lineno, cls, func.name))
        return
    if isinstance(t, ast.Name):
        func.locals.setdefault(t.id, []).append(Assignment(
            t.id, value, node.lineno, cls, func.name,
            _is_conditional(node, func.node, scan.parents)))
    elif _is_self_attr(t) and cls is not None:
        attr = t.attr
        scan.class_attrs.setdefault(cls, {}).setdefault(attr, []).append(Assignment(
            "self." + attr, value, node.lineno, cls, func.name,
            _is_conditional(node, func.node, scan.parents)))


def _is_self_attr(t: ast.expr) -> TypeGuard[ast.Attribute]:
    return isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and \
        t.value.id == "self"
