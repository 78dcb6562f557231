"""How a buffer is used: which accesses grow with the draft budget, and what they demand.

A use "grows with the budget" when the extent of an access (a slice bound, the source of a
`copy_`) resolves (like a buffer size, see bufsize) to an expression of the draft tokens, or is
taken from the draft tree's mask (`spec_info.custom_mask`).
A buffer whose size does not depend on the draft tokens but has such a use is the classic
budget-sizing suspect. A buffer is found as `self.<attr>` of its class, or, where a builder
allocates it as a local and stores it in a new instance (0.5.11's `DecodeInputBuffers.create`:
`cls(positions=positions)`), as that field, also through locals declared with the class
(`buffers: DecodeInputBuffers = self.buffers`) in the same module.

A "demand" is a local in the same function, sharing a word with the buffer's name, whose value
is per-request and grows with the draft tokens, e.g. in SGLang's triton backend
`seq_mask_len = self.num_draft_tokens * (seq_lens + self.num_draft_tokens)`: evaluated at the
longest seq_len a request can reach (`longest_seq_len`, see sources.reqlimit) for max_bs
requests, it is what the use needs at its worst.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ddprobe.sources.bufscan import Alloc, FuncInfo, ModuleScan
from ddprobe.sources.bufsize import DRAFT, SEQ, Resolver, _copy_expr

DRAFT_WORDS = frozenset({"num_draft_tokens", "draft_token_num", "speculative_num_draft_tokens",
                         "num_tokens_per_bs", "num_tokens_per_req", "draft_tokens", "draft_token",
                         "num_draft", "ddtree_budget", "tree_budget", "budget"})
# The draft tree's mask (`spec_info.custom_mask`) is laid out per draft token, so an extent taken
# from it grows with the budget whatever it is called locally.
MASK_WORDS = frozenset({"custom_mask", "tree_mask"})
_SEQ_LENS = frozenset({"seq_lens", "seq_len", "seq_lens_cpu"})
_STOP = frozenset({"cuda", "graph", "buf", "buffer", "len", "lens", "max", "num", "seq", "self",
                   "the", "cg", "static", "tmp", "cached"})


@dataclass(frozen=True)
class Use:
    file: str
    line: int
    func: str
    text: str  # the statement, shortened
    grows: bool  # the access extent depends on the draft tokens
    extent: str = ""  # the extent, resolved to sizing variables where possible


@dataclass(frozen=True)
class Demand:
    file: str
    line: int
    func: str
    name: str  # the local, e.g. seq_mask_len
    per_request: ast.expr  # the value with seq_lens -> longest_seq_len
    text: str  # as written


def _idents(node: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


class UseIndex:
    """Per-module index of `self.<attr>` accesses (and local aliases), built once per scan."""

    def __init__(self, scan: ModuleScan) -> None:
        self.scan = scan
        self.resolver = Resolver(scan, None, scan.cache.get("calls"))  # type: ignore[arg-type]
        # (cls, attr) -> [(func, ref node)]: direct loads plus loads of local aliases
        self.refs: dict[tuple[str | None, str], list[tuple[FuncInfo, ast.expr]]] = {
            k: list(v) for k, v in scan.self_refs.items()}
        for info in scan.funcs.values():
            aliases: dict[str, str] = {}
            for name, assigns in info.locals.items():
                for a in assigns:
                    root = _self_root(a.value)
                    if root is not None:
                        aliases[name] = root
            if not aliases:
                continue
            for node in info.name_loads:
                if node.id in aliases:
                    self.refs.setdefault((info.cls, aliases[node.id]), []).append((info, node))

    def grows(self, extent: ast.expr, info: FuncInfo, line: int) -> tuple[bool, str]:
        """Does an access extent grow with the draft tokens? (resolved like a buffer size, so
        `num_tokens_per_bs` means topk in a draft runner and draft tokens in the verify one)"""
        if _idents(extent) & MASK_WORDS:
            return True, ast.unparse(extent)
        res = self.resolver.resolve(extent, info.cls, info.name, line)
        return DRAFT in res.depends_on, res.text


def _self_root(v: ast.expr) -> str | None:
    """The attribute of self a local stands for: `x = self.a`, `x = self.a.buffer`, `x =
    self.a.buffer if self.a is not None else None` (0.5.2x's verify mask) all alias `a`."""
    if isinstance(v, ast.IfExp):
        for side in (v.body, v.orelse):
            if not (isinstance(side, ast.Constant) and side.value is None):
                return _self_root(side)
        return None
    while isinstance(v, ast.Attribute) and not (isinstance(v.value, ast.Name)
                                                and v.value.id == "self"):
        v = v.value
    if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name):
        return v.attr
    return None


def _stmt_of(node: ast.AST, parents: dict[int, ast.AST]) -> ast.AST:
    while not isinstance(node, ast.stmt) and id(node) in parents:
        node = parents[id(node)]
    return node


def _short(node: ast.AST, limit: int = 100) -> str:
    text = ast.unparse(node)
    s = text.splitlines()[0] if text else ""
    return s if len(s) <= limit else s[: limit - 3] + "..."


def find_uses(index: UseIndex, alloc: Alloc) -> list[Use]:
    """Accesses of `self.<attr>` (and its local aliases) across the allocating class, and of
    `x.<attr>` where a function of the module declares `x: <the class> = ...`."""
    if not alloc.target.startswith("self.") or alloc.cls is None or "[" in alloc.target:
        return []
    refs = [*index.refs.get((alloc.cls, alloc.attr), []),
            *typed_refs(index.scan, alloc.cls).get(alloc.attr, [])]
    uses = [u for info, ref in refs if (u := _use_of(index, info, ref)) is not None]
    uses.sort(key=lambda u: u.line)
    return uses


def constructor_field(scan: ModuleScan, alloc: Alloc) -> str | None:
    """The field a local allocation ends up in when its function builds the instance, as
    0.5.11's `DecodeInputBuffers.create` does: `return cls(positions=positions, ...)` (or the
    class called by its name). None for anything else."""
    if not alloc.is_local or alloc.cls is None or alloc.func is None:
        return None
    info = scan.funcs.get((alloc.cls, alloc.func))
    if info is None:
        return None
    for node in ast.walk(info.node):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                node.func.id in ("cls", alloc.cls)):
            for kw in node.keywords:
                if kw.arg and isinstance(kw.value, ast.Name) and kw.value.id == alloc.target:
                    return kw.arg
    return None


def typed_refs(scan: ModuleScan, cls: str
               ) -> dict[str, list[tuple[FuncInfo, ast.expr]]]:
    """attr -> `x.attr` loads in the module's functions that declare `x: cls = ...` (the
    runner's `buffers: DecodeInputBuffers = self.buffers`), built once per class."""
    key = f"typed:{cls}"
    cached = scan.cache.get(key)
    if isinstance(cached, dict):
        return cached
    out: dict[str, list[tuple[FuncInfo, ast.expr]]] = {}
    for info in scan.funcs.values():
        names = {n.target.id for n in ast.walk(info.node) if isinstance(n, ast.AnnAssign)
                 and isinstance(n.target, ast.Name) and _names_class(n.annotation, cls)}
        for node in info.name_loads:
            parent = scan.parents.get(id(node))
            if node.id in names and isinstance(parent, ast.Attribute) and parent.value is node:
                out.setdefault(parent.attr, []).append((info, parent))
    scan.cache[key] = out
    return out


def _names_class(ann: ast.expr, cls: str) -> bool:
    """`x: Cls`, `x: "Cls"` or `x: Optional[Cls]`."""
    if isinstance(ann, ast.Name):
        return ann.id == cls
    if isinstance(ann, ast.Constant):
        return ann.value == cls
    if isinstance(ann, ast.Subscript):
        return _names_class(ann.slice, cls)
    return False


def _use_of(index: UseIndex, info: FuncInfo, ref: ast.expr) -> Use | None:
    """The use one reference makes: an indexed access, a copy into it, or a call that lays
    it out per draft token; None for a bare reference or a value-only copy."""
    scan = index.scan
    parent = scan.parents.get(id(ref))
    if isinstance(parent, ast.Call) and ref in parent.args:
        return _passed_use(scan, info, ref, parent)
    extent: ast.expr | None = None
    if isinstance(parent, ast.Subscript) and parent.value is ref:
        extent = _indexed_extent(scan, parent)
    elif isinstance(parent, ast.Attribute) and parent.attr == "copy_":
        # a whole-buffer copy: only the draft mask's size is known to grow; other sources
        # are usually values (a count, a clamp) whose size is fixed
        extent = _mask_source(scan, parent)
    if extent is None:
        return None
    grows, text = index.grows(extent, info, ref.lineno)
    return Use(scan.file, ref.lineno, info.name, _short(_stmt_of(ref, scan.parents)), grows,
               text)


def _indexed_extent(scan: ModuleScan, sub: ast.Subscript) -> ast.expr:
    """`self.x[extent]`, or the draft mask copied into it (`self.x[...].copy_(mask)`)."""
    gp = scan.parents.get(id(sub))
    if isinstance(gp, ast.Attribute) and gp.attr == "copy_":
        src = _mask_source(scan, gp)
        if src is not None:
            return src
    return sub.slice


def _mask_source(scan: ModuleScan, copy: ast.Attribute) -> ast.expr | None:
    src = _copy_source(scan, copy)
    return src if src is not None and _idents(src) & MASK_WORDS else None


def _passed_use(scan: ModuleScan, info: FuncInfo, ref: ast.expr, call: ast.Call
                ) -> Use | None:
    """Handed to a kernel/helper together with the draft-token count: the callee lays the
    buffer out per draft token."""
    drafts = [a for a in [*call.args, *[k.value for k in call.keywords]]
              if a is not ref and _idents(a) & DRAFT_WORDS]
    if not drafts:
        return None
    return Use(scan.file, ref.lineno, info.name, _short(_stmt_of(ref, scan.parents)), True,
               f"passed to {ast.unparse(call.func)}() with {ast.unparse(drafts[0])}")


def _copy_source(scan: ModuleScan, attr: ast.Attribute) -> ast.expr | None:
    """The source of `x.copy_(src)` when its size can vary (a tensor, not values built by a
    call such as `torch.tensor([n] * dp)`)."""
    call = scan.parents.get(id(attr))
    if isinstance(call, ast.Call) and call.args and not isinstance(call.args[0], ast.Call):
        return call.args[0]
    return None


def _words(name: str) -> set[str]:
    return {w for w in re.split(r"[_\W]+", name.lower()) if w and w not in _STOP}


def find_demands(scan: ModuleScan, alloc: Alloc, uses: list[Use]) -> list[Demand]:
    """Per-request size expressions next to the growing uses (see the module docstring)."""
    funcs = {u.func for u in uses if u.grows}
    words = _words(alloc.attr)
    out: list[Demand] = []
    for fname in sorted(funcs):
        info = scan.funcs.get((alloc.cls, fname))
        if info is None:
            continue
        for name, assigns in info.locals.items():
            if not (_words(name) & words):
                continue
            for a in assigns:
                ids = _idents(a.value)
                if not (ids & DRAFT_WORDS) or not (ids & _SEQ_LENS):
                    continue
                per_req = _SeqToContext().visit(_copy(a.value))
                out.append(Demand(scan.file, a.line, fname, name, per_req,
                                  ast.unparse(a.value)))
    return out


class _SeqToContext(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in _SEQ_LENS:
            return ast.copy_location(ast.Name(id=SEQ, ctx=ast.Load()), node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if node.attr in _SEQ_LENS:
            return ast.copy_location(ast.Name(id=SEQ, ctx=ast.Load()), node)
        self.generic_visit(node)
        return node


def _copy(node: ast.expr) -> ast.expr:
    return _copy_expr(node)
