"""Resolve a buffer's size expression to sizing variables (evaluation: see bufeval).

Names in a shape expression are followed through simple assignments (a local assigned earlier in
the same function, or a `self.attr` assigned once in the class) until they reach one of the
canonical sizing variables below or a free symbol (a model property such as `num_head`, which the
user may give with `--var num_head=32`). Every step taken is kept as a note, so the user sees
*why* `max_num_tokens * self.max_context_len` means `max_bs * draft_tokens * context_len`.
"""
from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ddprobe.sources.bufeval import _FUNCS
from ddprobe.sources.bufscan import Assignment, CallSite, FuncInfo, ModuleScan
from ddprobe.untrusted import first_chars

CALLER_TEXT_CAP = 80  # characters of a caller's argument (source text) a note quotes

# canonical sizing variables (what --max-bs/--budgets/--context-len/--var set)
MAX_BS = "max_bs"
DRAFT = "draft_tokens"  # budget + 1
CONTEXT = "context_len"
TOPK = "topk"
STEPS = "num_steps"
POOL = "req_pool_size"
# a use's per-request seq_len at its worst: the longest sequence the release lets a request
# reach (sources.reqlimit; context_len - 2 in SGLang), set only in the uses' demands
SEQ = "longest_seq_len"
CANONICAL = (MAX_BS, DRAFT, CONTEXT, SEQ, TOPK, STEPS, POOL)

# Names that mean one thing wherever they appear: they win over following assignments.
STRONG: dict[str, str] = {
    "max_bs": MAX_BS, "max_batch_size": MAX_BS, "max_bs_in_cuda_graph": MAX_BS,
    "cuda_graph_max_bs": MAX_BS,
    "max_context_len": CONTEXT, "context_len": CONTEXT, "max_seq_len": CONTEXT,
    "num_draft_tokens": DRAFT, "speculative_num_draft_tokens": DRAFT, "draft_token_num": DRAFT,
    "speculative_eagle_topk": TOPK, "topk": TOPK,
    "speculative_num_steps": STEPS, SEQ: SEQ,
}
# Fallbacks when no single assignment explains a name (e.g. set in several branches).
WEAK: dict[str, str] = {
    "num_tokens_per_bs": DRAFT, "num_tokens_per_req": DRAFT,
    "max_num_tokens": f"{MAX_BS} * {DRAFT}", "max_num_token": f"{MAX_BS} * {DRAFT}",
    "max_running_requests": POOL,
}
# Attribute chains whose meaning comes from the whole suffix, not the last word.
SUFFIXES: dict[str, str] = {"req_to_token_pool.size": POOL}

_MAX_DEPTH = 12


@dataclass(frozen=True)
class Resolved:
    expr: ast.expr
    text: str
    depends_on: tuple[str, ...]  # canonical sizing variables used
    free: tuple[str, ...]  # other symbols (model properties, unknowns)
    notes: tuple[str, ...]




def _module_const(name: str, const: ast.expr | None, notes: list[str]) -> ast.expr:
    """A module constant's number (said in a note), else `name` as a symbol."""
    if isinstance(const, ast.Constant) and isinstance(const.value, (int, float)) and not \
            isinstance(const.value, bool):
        notes.append(f"{name} = {const.value}  [module constant]")
        return ast.Constant(const.value)
    return _symbol(name)


class Resolver:
    """Resolves names inside one module (one scan), following simple assignments.

    `functions` (module-level functions of every read module) lets a size computed by a small
    helper, e.g. `tree_mask_numel(mode, max_bs, ...)`, be inlined branch by branch."""

    def __init__(self, scan: ModuleScan,
                 functions: Mapping[str, ast.FunctionDef | ast.AsyncFunctionDef] | None = None,
                 calls: Mapping[str, Sequence[CallSite]] | None = None) -> None:
        self.scan = scan
        self.functions = functions or {}
        self.calls = calls if calls is not None else scan.calls

    def resolve(self, expr: ast.expr, cls: str | None, func: str | None, line: int) -> Resolved:
        notes: list[str] = []
        node = self._sub(expr, cls, func, line, 0, notes, frozenset())
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        primary = _primary_names(node)
        deps = tuple(v for v in CANONICAL if v in primary)
        free = tuple(sorted(n for n in names if n not in CANONICAL and n not in _FUNCS))
        uniq = tuple(dict.fromkeys(notes))  # first occurrence of each note, in order
        return Resolved(node, ast.unparse(node), deps, free, uniq)

    # -- substitution ------------------------------------------------------------------------
    def _func(self, cls: str | None, func: str | None) -> FuncInfo | None:
        if func is None:
            return None
        return self.scan.funcs.get((cls, func))

    def _sub(self, node: ast.expr, cls: str | None, func: str | None, line: int, depth: int,
             notes: list[str], seen: frozenset[str]) -> ast.expr:
        if depth > _MAX_DEPTH:
            return node
        if isinstance(node, ast.Name):
            return self._name(node, cls, func, line, depth, notes, seen)
        if isinstance(node, ast.Attribute):
            return self._attr(node, cls, func, line, depth, notes, seen)
        if isinstance(node, ast.Call):
            inlined = self._inline(node, cls, func, line, depth, notes, seen)
            if inlined is not None:
                return inlined
            # keep the callee as written; resolve the arguments
            new = ast.Call(func=node.func,
                           args=[self._sub(a, cls, func, line, depth + 1, notes, seen)
                                 for a in node.args],
                           keywords=[ast.keyword(arg=k.arg, value=self._sub(
                               k.value, cls, func, line, depth + 1, notes, seen))
                               for k in node.keywords])
            return ast.copy_location(new, node)
        if isinstance(node, ast.Subscript):
            return _symbol(ast.unparse(node))
        new_node = _clone_shallow(node)
        for fname, value in ast.iter_fields(node):
            if isinstance(value, ast.expr):
                setattr(new_node, fname, self._sub(value, cls, func, line, depth + 1, notes, seen))
            elif isinstance(value, list):
                setattr(new_node, fname, [self._sub(v, cls, func, line, depth + 1, notes, seen)
                                          if isinstance(v, ast.expr) else v for v in value])
        return new_node

    def _name(self, node: ast.Name, cls: str | None, func: str | None, line: int, depth: int,
              notes: list[str], seen: frozenset[str]) -> ast.expr:
        name = node.id
        info = self._func(cls, func)
        assigns = [a for a in info.locals.get(name, []) if a.line < line] if info else []
        # keyed by line: `n = max(n, ...)` refers to the earlier n, not to itself
        if assigns and f"{name}@{assigns[-1].line}" not in seen:
            return self._local(name, assigns[-1], info, cls, func, depth, notes, seen)
        if info is not None and name in info.params:
            passed = self._from_callers(info, name, depth, notes, seen)
            if passed is not None:
                return passed
            return self._vocab(name, name, notes, param=True, cls=cls, func=func)
        if name in STRONG or name in WEAK:
            return self._vocab(name, name, notes, cls=cls, func=func)
        return _module_const(name, self.scan.module_consts.get(name), notes)

    def _local(self, name: str, a: Assignment, info: FuncInfo | None, cls: str | None,
               func: str | None, depth: int, notes: list[str],
               seen: frozenset[str]) -> ast.expr:
        """A local `name` by its last assignment `a` before the use."""
        cond = " (conditional)" if a.conditional else ""
        sub: list[str] = [f"{name} = {_short(a.value)}  [line {a.line}]{cond}"]
        if a.conditional and info is not None and name in info.params:
            sub.append(self._call_sites_note(info, name))
        out = self._sub(a.value, cls, func, a.line, depth + 1, sub, seen | {f"{name}@{a.line}"})
        kept = self._keep(name, out, sub, notes)
        if isinstance(kept, ast.Name) and kept.id == name and name in WEAK:
            # an opaque value (`self._target_verify_num_tokens_per_req(spec_info)`, 0.5.2x)
            # under a sizing name: the name's meaning, said in a note
            notes.append(f"{name} = {_short(a.value)}  [line {a.line}]")
            return self._vocab(name, name, notes, cls=cls, func=func)
        return kept

    def _attr(self, node: ast.Attribute, cls: str | None, func: str | None, line: int,
              depth: int, notes: list[str], seen: frozenset[str]) -> ast.expr:
        text = ast.unparse(node)
        if isinstance(node.value, ast.Name) and node.value.id == "self" and cls is not None:
            return self._self_attr(node.attr, text, cls, func, depth, notes, seen)
        for suffix, var in SUFFIXES.items():
            if text == suffix or text.endswith("." + suffix):
                notes.append(f"{text} -> {var}")
                return ast.Name(id=var, ctx=ast.Load())
        return self._other_attr(node.attr, text, cls, func, notes)

    def _self_attr(self, name: str, text: str, cls: str, func: str | None, depth: int,
                   notes: list[str], seen: frozenset[str]) -> ast.expr:
        """`self.name`: a sizing name, or what the class assigns it (the same everywhere)."""
        assigns = self.scan.class_attrs.get(cls, {}).get(name, [])
        if name in STRONG:
            if len(assigns) == 1:
                notes.append(f"self.{name} = {_short(assigns[0].value)}  "
                             f"[line {assigns[0].line}]")
            return self._vocab(name, text, notes)
        key = f"self.{name}"
        if assigns and key not in seen and _all_same(assigns):
            a = assigns[0]
            sub = [f"self.{name} = {_short(a.value)}  [line {a.line}]"]
            out = self._sub(a.value, cls, a.func, a.line, depth + 1, sub, seen | {key})
            return self._keep(name, out, sub, notes)
        if name in WEAK and "prefill" not in f"{cls} {func}".lower():
            if len(assigns) > 1:
                notes.append(f"self.{name} is assigned in {len(assigns)} places; taken as "
                             f"{WEAK[name]} (the speculative case)")
            return self._vocab(name, text, notes)
        return _symbol(name)

    def _other_attr(self, last: str, text: str, cls: str | None, func: str | None,
                    notes: list[str]) -> ast.expr:
        """`obj.name` on some other object than self."""
        if last not in STRONG and last not in WEAK:
            return _symbol(last)
        # a sizing name on some object: it means the server's setting only when read from
        # server_args (or the context length from the model config); elsewhere, e.g.
        # draft_model_config.num_draft_tokens, it is a fixed property of that object
        parts = text.split(".")
        if "server_args" in parts or (STRONG.get(last) == CONTEXT and "model_config" in
                                      parts) or last.startswith("speculative_"):
            return self._vocab(last, text, notes, cls=cls, func=func)
        sym = _symbol("_".join(parts[-2:]))
        notes.append(f"{text} is not the server's setting: kept as {sym.id}")
        return sym

    def _from_callers(self, info: FuncInfo, param: str, depth: int, notes: list[str],
                      seen: frozenset[str]) -> ast.expr | None:
        """A parameter's size from what its callers pass (`init_cuda_graph_state(
        self.max_num_token)` into a parameter named `max_bs` is max_bs * draft_tokens), not
        from its name. Callers on a draft backend (`draft_attn_backend`, `attn_backends[i]`)
        size the draft's own instance: the target's callers decide the verify buffers."""
        method = info.name.split(".")[-1]
        params = [p for p in info.params if p not in ("self", "cls")]
        if param not in params or f"param:{method}.{param}" in seen:
            return None
        found = self._passed(info, method, param, params)
        if not found:
            return None
        # which instance: a draft backend class is called through the draft receivers, any
        # other backend's verify buffers are sized by the target's callers
        want_draft = _draft_class(info.cls)
        mine = [(s, a) for s, a in found if _draft_receiver(s.receiver) == want_draft]
        use = mine or found
        others = [(s, a) for s, a in found if (s, a) not in use]
        outs = self._resolve_passed(use, depth, seen | {f"param:{method}.{param}"})
        if not outs:
            return None
        return _callers_size(f"{param} (parameter of {method})", use, others, outs,
                             want_draft, notes)

    def _passed(self, info: FuncInfo, method: str, param: str, params: list[str]
                ) -> list[tuple[CallSite, ast.expr]]:
        """(call site, the expression it passes for `param`) of every caller of `method`."""
        idx = params.index(param)
        fn = info.node.args
        has_var = fn.vararg is not None or fn.kwarg is not None
        found: list[tuple[CallSite, ast.expr]] = []
        for site in self.calls.get(method, []):
            if site.cls == info.cls and site.func == method:
                continue  # recursion / a wrapper calling itself
            if not _may_call(site, info.cls, params, has_var):
                continue  # another class's method of the same name
            arg = dict(site.kwargs).get(param)
            if arg is None and idx < len(site.args) and not isinstance(site.args[idx],
                                                                      ast.Starred):
                arg = site.args[idx]
            if arg is not None:
                found.append((site, arg))
        return found

    def _resolve_passed(self, use: list[tuple[CallSite, ast.expr]], depth: int,
                        seen: frozenset[str]) -> list[tuple[CallSite, ast.expr]]:
        """What each caller passes, resolved in the caller's own module (when it was read)."""
        scans = self.scan.cache.get("scans") or {}
        outs: list[tuple[CallSite, ast.expr]] = []
        for site, arg in use:
            home = scans.get(site.file) if isinstance(scans, Mapping) else None
            if not isinstance(home, ModuleScan):
                continue
            res = Resolver(home, self.functions, self.calls)
            outs.append((site, res._sub(arg, site.cls, site.func, site.line, depth + 1, [],
                                        seen)))
        return outs

    def _call_sites_note(self, info: FuncInfo, param: str) -> str:
        """Whether callers pass a parameter that the function replaces when it is missing."""
        method = info.name.split(".")[-1]
        params = [p for p in info.params if p not in ("self", "cls")]
        idx = params.index(param) if param in params else 99
        without: list[str] = []
        with_: list[str] = []
        for site in self.calls.get(method, []):
            (with_ if site.nargs > idx or param in site.keywords else without).append(
                f"{site.file}:{site.line}")
        parts = []
        if without:
            parts.append(f"called without {param} at {', '.join(without[:4])} (the "
                         "assignment above applies)")
        if with_:
            parts.append(f"with {param} at {', '.join(with_[:4])}")
        return f"{method}(): " + ("; ".join(parts) if parts else "no call site found")

    def _inline(self, node: ast.Call, cls: str | None, func: str | None, line: int, depth: int,
                notes: list[str], seen: frozenset[str]) -> ast.expr | None:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        fn = self.functions.get(name or "")
        if fn is None or depth > _MAX_DEPTH - 2:
            return None
        paths = branch_returns(fn)
        if not paths:
            return None
        params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]]
        bound: dict[str, ast.expr] = {}
        for p, a in zip(params, node.args, strict=False):
            bound[p] = a
        for k in node.keywords:
            if k.arg:
                bound[k.arg] = k.value
        outs: list[ast.expr] = []
        for label, expr in paths:
            body = _Bind(bound).visit(_copy_expr(expr))
            outs.append(self._sub(body, cls, func, line, depth + 1, notes, seen))
            notes.append(f"{name}(): {label or 'returns'} -> {ast.unparse(outs[-1])}")
        if len(outs) == 1:
            return outs[0]
        notes.append(f"{name}(): the branch is chosen at run time; sized as the largest")
        return ast.Call(func=ast.Name(id="max", ctx=ast.Load()), args=outs, keywords=[])

    @staticmethod
    def _keep(name: str, expanded: ast.expr, sub_notes: list[str], notes: list[str]) -> ast.expr:
        """Keep an expansion only when it says something about sizing (a sizing variable or a
        plain number); otherwise the name itself (`num_head`) is the clearer free symbol."""
        names = {n.id for n in ast.walk(expanded) if isinstance(n, ast.Name)}
        if names & set(CANONICAL) or not names - set(_FUNCS):
            notes.extend(sub_notes)
            return expanded
        return _symbol(name)

    def _vocab(self, name: str, text: str, notes: list[str], param: bool = False,
               cls: str | None = None, func: str | None = None) -> ast.expr:
        target = STRONG.get(name) or WEAK.get(name)
        if name in WEAK and "prefill" in f"{cls} {func}".lower():
            return _symbol(name)  # a prefill graph's token count is not a draft quantity
        if target is None:
            return _symbol(name)
        if target != name or text != name:
            why = " (parameter)" if param else ""
            notes.append(f"{text}{why} -> {target}")
        return _parsed(target)


def _may_call(site: CallSite, cls: str | None, params: Sequence[str], has_var: bool) -> bool:
    """Whether a call site can be a call of `cls`'s method with these parameters: a class
    named as the receiver must be that class, and the arguments must fit the signature."""
    recv = site.receiver.split(".")[-1]
    if recv[:1].isupper() and recv.isidentifier() and recv != cls:
        return False
    if has_var:
        return True
    return site.nargs <= len(params) and all(k in params for k in site.keywords)


def _draft_class(cls: str | None) -> bool:
    """`TritonMultiStepDraftBackend`, `FlashInferMultiStepDraftBackend`: draft backends."""
    low = (cls or "").lower()
    return "draft" in low or "multistep" in low


def _draft_receiver(receiver: str) -> bool:
    """`self.model_runner.draft_attn_backend`, `self.attn_backends[i]`: a draft backend."""
    return "draft" in receiver or "attn_backends[" in receiver


def _callers_size(what: str, use: list[tuple[CallSite, ast.expr]],
                  others: list[tuple[CallSite, ast.expr]], outs: list[tuple[CallSite, ast.expr]],
                  want_draft: bool, notes: list[str]) -> ast.expr | None:
    """The size the callers pass (the largest when they differ), with a note saying where it
    comes from; None when they say nothing about sizing (then the name's meaning stays)."""
    texts = {ast.unparse(e) for _, e in outs}
    names = {n.id for _, e in outs for n in ast.walk(e) if isinstance(n, ast.Name)}
    if not names & set(CANONICAL) or names - set(CANONICAL) - set(_FUNCS):
        # the callers say nothing about sizing, or pass what only runs can tell
        # (`max(self.capture_num_tokens) if ... else ...`): keep the name's meaning
        if names & set(CANONICAL):
            passed = first_chars(sorted(texts)[0], CALLER_TEXT_CAP)
            notes.append(f"{what}: callers pass {passed}, not resolvable here; "
                         f"sized by the parameter's name")
        return None
    where = ", ".join(f"{s.file}:{s.line} ({ast.unparse(a)})" for s, a in use[:3])
    if others:
        where += (f"; not the {'target' if want_draft else 'draft'}'s callers at "
                  + ", ".join(f"{s.file}:{s.line}" for s, _ in others[:3]))
    if len(texts) == 1:
        notes.append(f"{what} <- {where} -> {texts.pop()}")
        return outs[0][1]
    notes.append(f"{what} <- {where}: callers differ; sized as the largest")
    return ast.Call(func=ast.Name(id="max", ctx=ast.Load()), args=[e for _, e in outs],
                    keywords=[])


class _Bind(ast.NodeTransformer):
    def __init__(self, bound: Mapping[str, ast.expr]) -> None:
        self.bound = bound

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return _copy_expr(self.bound[node.id]) if node.id in self.bound else node


_PARSED: dict[str, ast.expr] = {}


def _parsed(text: str) -> ast.expr:
    """A vocabulary expression, parsed once (the nodes are shared, never mutated)."""
    if text not in _PARSED:
        _PARSED[text] = ast.parse(text, mode="eval").body
    return _PARSED[text]


def _copy_expr(node: ast.AST) -> ast.expr:
    """A deep copy of an expression (cheaper than unparse + parse)."""
    if not isinstance(node, ast.AST):
        return node
    new = type(node)()
    for k, v in ast.iter_fields(node):
        if isinstance(v, list):
            setattr(new, k, [_copy_expr(x) if isinstance(x, ast.AST) else x for x in v])
        elif isinstance(v, ast.AST) and not isinstance(v, (ast.expr_context, ast.operator,
                                                             ast.boolop, ast.cmpop,
                                                             ast.unaryop)):
            setattr(new, k, _copy_expr(v))
        else:
            setattr(new, k, v)
    return new  # type: ignore[return-value]


def branch_returns(fn: ast.FunctionDef | ast.AsyncFunctionDef
                   ) -> list[tuple[str, ast.expr]] | None:
    """For a small function of assignments, if/elif/else and returns: per returning path, its
    condition and the returned expression with the function's locals substituted. None when the
    function does anything else (loops, calls for effect...)."""
    done: list[tuple[str, ast.expr]] = []

    def run(stmts: list[ast.stmt], label: list[str], env: dict[str, ast.expr]) -> bool:
        for k, st in enumerate(stmts):
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
                continue  # docstring
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(
                    st.targets[0], ast.Name):
                env = {**env, st.targets[0].id: _Bind(env).visit(_copy_expr(st.value))}
                continue
            if isinstance(st, ast.Return) and st.value is not None:
                done.append((" and ".join(label), _Bind(env).visit(_copy_expr(st.value))))
                return True
            if isinstance(st, ast.Raise):
                return True
            if isinstance(st, ast.If):
                test = ast.unparse(st.test)
                rest = stmts[k + 1:]
                ok = run(st.body + rest, [*label, test], env)
                ok = ok and run((st.orelse or []) + rest, [*label, f"not ({test})"], env)
                return ok and len(done) <= 8
            return False
        return True

    ok = run(list(fn.body), [], {})
    return done if ok and done else None


def _all_same(assigns: list[Assignment]) -> bool:
    first = ast.dump(assigns[0].value)
    return all(ast.dump(a.value) == first for a in assigns[1:])


def _short(node: ast.expr, limit: int = 90) -> str:
    s = ast.unparse(node)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _symbol(text: str) -> ast.Name:
    ident = "".join(c if c.isalnum() or c == "_" else "_" for c in text).strip("_") or "unknown"
    if ident[0].isdigit():
        ident = "_" + ident
    return ast.Name(id=ident, ctx=ast.Load())


_N = TypeVar("_N", bound=ast.AST)


def _clone_shallow(node: _N) -> _N:
    new = type(node)()
    for k, v in ast.iter_fields(node):
        setattr(new, k, list(v) if isinstance(v, list) else v)
    for a in ("lineno", "col_offset", "end_lineno", "end_col_offset"):
        if hasattr(node, a):
            setattr(new, a, getattr(node, a))
    return new


# ----- evaluation -----------------------------------------------------------------------------

def _primary_names(node: ast.AST) -> set[str]:
    """Names a value depends on, taking `a or b` as `a` (b is only a fallback)."""
    out: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or) and n.values:
            stack.append(n.values[0])
            continue
        if isinstance(n, ast.Name):
            out.add(n.id)
        stack.extend(ast.iter_child_nodes(n))
    return out
