"""Read launch flags from an install's server_args.py (+ 0.5.2x's arg_groups) with `ast`."""
from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ddprobe.errors import ConfigError, RefusedError
from ddprobe.sources import determinism
from ddprobe.sources.flags import SERVER_ARGS, Flag, FlagSet
from ddprobe.sources.pyparse import UNPARSABLE, why


def parse_flags(texts: Mapping[str, str], *, package: str = "", version: str | None = None
                ) -> FlagSet:
    """Flags from server_args.py (+ the modules it imports for field-declared flags)."""
    if SERVER_ARGS not in texts:
        raise RefusedError(f"{SERVER_ARGS} not found in {package or 'the install'}"
                           f"{' ' + version if version else ''}: cannot read its flags")
    trees: dict[str, ast.Module] = {}
    for path, text in texts.items():
        try:
            trees[path] = ast.parse(text, filename=path)
        except UNPARSABLE as e:
            if path == SERVER_ARGS:
                raise ConfigError(f"cannot parse: {why(e)}", path=path,
                                  line=e.lineno if isinstance(e, SyntaxError) else None) from None
    consts = _module_consts(trees.values())
    flags: list[Flag] = []
    seen: set[str] = set()
    for f in _argparse_flags(SERVER_ARGS, trees[SERVER_ARGS], consts):
        flags.append(f)
        seen.update(f.names)
    if "add_cli_args_from_dataclass" in texts[SERVER_ARGS]:
        for path in sorted(trees):
            for f in _field_flags(path, trees[path], consts):
                if not (set(f.names) & seen):
                    flags.append(f)
                    seen.update(f.names)
    det = determinism.read(texts, flag=determinism.FLAG in seen, version=version)
    return FlagSet(tuple(sorted(flags, key=lambda f: f.name)), package, version, SERVER_ARGS,
                   det)


def _module_consts(trees: Iterable[ast.Module]) -> dict[str, ast.expr]:
    out: dict[str, ast.expr] = {}
    for tree in trees:
        for st in tree.body:
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(
                    st.targets[0], ast.Name):
                out.setdefault(st.targets[0].id, st.value)
            elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value:
                out.setdefault(st.target.id, st.value)
    return out


def _strings(node: ast.expr | None, consts: Mapping[str, ast.expr], depth: int = 0
             ) -> list[str] | None:
    """A static list of strings (choices), or None when it is computed at runtime."""
    if node is None or depth > 6:
        return None
    handler = _STRINGS.get(type(node))
    return None if handler is None else handler(node, consts, depth + 1)


def _strings_seq(node: ast.List | ast.Tuple | ast.Set, consts: Mapping[str, ast.expr],
                 depth: int) -> list[str] | None:
    out: list[str] = []
    for e in node.elts:
        if isinstance(e, ast.Starred):
            sub = _strings(e.value, consts, depth)
            if sub is None:
                return None
            out.extend(sub)
        elif isinstance(e, ast.Constant) and isinstance(e.value, (str, int)):
            out.append(str(e.value))
        else:
            return None
    return out


def _strings_dict(node: ast.Dict, consts: Mapping[str, ast.expr], depth: int
                  ) -> list[str] | None:
    keys = [k for k in node.keys if k is not None]
    if not all(isinstance(k, ast.Constant) for k in keys):
        return None
    return [str(k.value) for k in keys if isinstance(k, ast.Constant)]


def _strings_name(node: ast.Name, consts: Mapping[str, ast.expr], depth: int
                  ) -> list[str] | None:
    return _strings(consts.get(node.id), consts, depth)


def _strings_binop(node: ast.BinOp, consts: Mapping[str, ast.expr], depth: int
                   ) -> list[str] | None:
    if not isinstance(node.op, ast.Add):
        return None
    a, b = _strings(node.left, consts, depth), _strings(node.right, consts, depth)
    return None if a is None or b is None else a + b


_CONVERSIONS = ("list", "set", "tuple", "sorted", "frozenset")


def _strings_call(node: ast.Call, consts: Mapping[str, ast.expr], depth: int
                  ) -> list[str] | None:
    """`list(X)`, `sorted(X)`... and `X.keys()`: the strings of X."""
    f = node.func
    if isinstance(f, ast.Name) and f.id in _CONVERSIONS and len(node.args) == 1:
        return _strings(node.args[0], consts, depth)
    if isinstance(f, ast.Attribute) and f.attr == "keys" and not node.args:
        return _strings(f.value, consts, depth)
    return None


_STRINGS: dict[type[ast.expr], Callable[[Any, Mapping[str, ast.expr], int], list[str] | None]] = {
    ast.List: _strings_seq, ast.Tuple: _strings_seq, ast.Set: _strings_seq,
    ast.Dict: _strings_dict, ast.Name: _strings_name, ast.BinOp: _strings_binop,
    ast.Call: _strings_call,
}


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def _text(node: ast.expr | None) -> str | None:
    if node is None:
        return None
    if isinstance(node, ast.Constant):
        return str(node.value)
    return ast.unparse(node)


def _const_str(node: ast.expr | None) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant)
                       and isinstance(v.value, str))
    if isinstance(node, ast.BinOp):
        return _const_str(node.left) + _const_str(node.right)
    return ""


def _argparse_flags(path: str, tree: ast.Module, consts: Mapping[str, ast.expr]) -> list[Flag]:
    out: list[Flag] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "add_argument":
            f = _add_argument_flag(path, node, consts)
            if f is not None:
                out.append(f)
    return out


def _add_argument_flag(path: str, node: ast.Call, consts: Mapping[str, ast.expr]
                       ) -> Flag | None:
    names = [a.value for a in node.args if isinstance(a, ast.Constant)
             and isinstance(a.value, str)]
    if not names or not all(n.startswith("-") for n in names):
        return None  # positionals / computed names: not launch flags
    longs = [n for n in names if n.startswith("--")] or names
    dest = _text(_kw(node, "dest")) or longs[0].lstrip("-").replace("-", "_")
    spellings, action_s = _spellings(names, longs, _action(_kw(node, "action")))
    typ = _kw(node, "type")
    choices = _strings(_kw(node, "choices"), consts)
    req = _kw(node, "required")
    help_s = _const_str(_kw(node, "help"))
    return Flag(
        names=tuple(spellings), dest=dest, file=path, line=node.lineno, action=action_s,
        type=None if typ is None else ast.unparse(typ).rsplit(".", 1)[-1],
        choices=None if choices is None else tuple(choices),
        nargs=_nargs(_kw(node, "nargs")), default=_text(_kw(node, "default")),
        required=isinstance(req, ast.Constant) and req.value is True, help=help_s,
        deprecated="deprecat" in (help_s.lower() + (action_s or "").lower()))


def _spellings(names: list[str], longs: list[str], action: str | None
               ) -> tuple[list[str], str | None]:
    """(every spelling, long ones first; the action, BooleanOptionalAction by its short name)."""
    spellings = longs + [n for n in names if n not in longs]
    if action and action.rsplit(".", 1)[-1] == "BooleanOptionalAction":
        # argparse adds --no-NAME for every --NAME (seen on 0.5.11: --no-record-nolora-graph)
        spellings += ["--no-" + n[2:] for n in longs if n.startswith("--")]
        return spellings, "BooleanOptionalAction"
    return spellings, action


def _action(node: ast.expr | None) -> str | None:
    """`action=` as written: a string constant's value, else the expression's source."""
    if node is None:
        return None
    if isinstance(node, ast.Constant):
        return None if node.value is None else str(node.value)
    return ast.unparse(node)


def _nargs(node: ast.expr | None) -> str | None:
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return None
    return _text(node)


_SCALARS = {"int": "int", "float": "float", "str": "str", "bool": "bool"}


def _field_flags(path: str, tree: ast.Module, consts: Mapping[str, ast.expr]) -> list[Flag]:
    """`name: A[T, "help" | Arg(...)] = default` in namespace classes (or ServerArgs)."""
    out: list[Flag] = []
    for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
        is_ns = cls.name == "ServerArgs" or any(
            isinstance(s, (ast.Assign, ast.AnnAssign)) and "_NS_PATH" in ast.unparse(
                s.targets[0] if isinstance(s, ast.Assign) else s.target) for s in cls.body)
        if not is_ns:
            continue
        for st in cls.body:
            if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                continue
            f = _field_flag(path, st, consts)
            if f is not None:
                out.append(f)
    return out


def _field_flag(path: str, st: ast.AnnAssign, consts: Mapping[str, ast.expr]) -> Flag | None:
    parts = _annotated_parts(st.annotation)
    if parts is None:
        return None
    inner, metas = parts[0], parts[1:]
    meta = _cli_meta(metas)
    if meta is None:
        return None  # no CLI metadata: not registered
    arg, help_s = meta
    name = st.target.id  # type: ignore[union-attr]
    kw: dict[str, ast.expr] = {k.arg: k.value for k in (arg.keywords if arg else []) if k.arg}
    no_cli = kw.get("no_cli")
    if isinstance(no_cli, ast.Constant) and no_cli.value is True:
        return None
    help_s = _const_str(kw.get("help")) or help_s
    cli = _text(kw.get("cli_name")) or "--" + name.replace("_", "-")
    aliases = _strings(kw.get("aliases"), consts) or []
    inner_t, literal = _unwrap(inner)
    choices = _strings(kw.get("choices"), consts) if "choices" in kw else literal
    action, nargs = _field_action_nargs(inner_t, kw)
    # `Arg(action=argparse.BooleanOptionalAction)` goes to add_argument as is: --no-NAME too
    names, action = _spellings([cli, *aliases], [n for n in (cli, *aliases)
                                                 if n.startswith("--")] or [cli], action)
    default = _text(st.value) if st.value is not None else None
    return Flag(names=tuple(names), dest=name, file=path, line=st.lineno, action=action,
                type=_SCALARS.get(inner_t), choices=None if choices is None else tuple(choices),
                nargs=nargs, default=default, required=st.value is None and action is None,
                help=help_s, deprecated="deprecat" in help_s.lower())


def _annotated_parts(ann: ast.expr) -> list[ast.expr] | None:
    """The parts of `A[T, meta...]` / `Annotated[T, meta...]` (at least two), else None."""
    if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, (ast.Name, ast.Attribute))
            and ast.unparse(ann.value).rsplit(".", 1)[-1] in ("A", "Annotated")):
        return None
    parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
    return parts if len(parts) >= 2 else None


def _cli_meta(metas: list[ast.expr]) -> tuple[ast.Call | None, str] | None:
    """(the `Arg(...)` call, or None with the help string) of the first CLI metadata; None
    when there is none."""
    for m in metas:
        if isinstance(m, ast.Call) and ast.unparse(m.func).rsplit(".", 1)[-1] == "Arg":
            return m, ""
        if isinstance(m, (ast.Constant, ast.JoinedStr, ast.BinOp)) and _const_str(m):
            return None, _const_str(m)
    return None


def _field_action_nargs(inner_t: str, kw: Mapping[str, ast.expr]
                        ) -> tuple[str | None, str | None]:
    action = _text(kw.get("action"))
    extra = kw.get("action_kwargs")  # `action_kwargs={"type": str, "nargs": "*"}`
    given = {k.value: v for k, v in zip(extra.keys, extra.values, strict=True) if isinstance(
        k, ast.Constant)} if isinstance(extra, ast.Dict) else {}
    nargs = _text(kw.get("nargs") or given.get("nargs"))
    if action is None and inner_t == "bool":
        action = "store_true"
    if inner_t == "list" and nargs is None and "type_parser" not in kw:
        nargs = "+"
    return action, nargs


def _unwrap(t: ast.expr) -> tuple[str, list[str] | None]:
    """(base type name, Literal values) of an annotation like Optional[Literal["a", "b"]]."""
    while isinstance(t, ast.Subscript):
        head = ast.unparse(t.value).rsplit(".", 1)[-1]
        if head == "Optional":
            t = t.slice
            continue
        if head == "Literal":
            elts = t.slice.elts if isinstance(t.slice, ast.Tuple) else [t.slice]
            vals = [str(e.value) for e in elts if isinstance(e, ast.Constant)]
            return "str", vals
        if head in ("list", "List", "Sequence", "tuple", "Tuple"):
            return "list", None
        if head == "Union":
            elts = t.slice.elts if isinstance(t.slice, ast.Tuple) else [t.slice]
            non_none = [e for e in elts if ast.unparse(e) != "None"]
            if len(non_none) == 1:
                t = non_none[0]
                continue
        return head, None
    if isinstance(t, ast.BinOp) and isinstance(t.op, ast.BitOr):  # X | None
        for side in (t.left, t.right):
            if ast.unparse(side) != "None":
                return _unwrap(side)
    return ast.unparse(t).rsplit(".", 1)[-1], None
