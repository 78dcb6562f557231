"""The tiny, safe condition language of playbook `when:` / `assert:` and `${...}` references.

    bisect.verdicts.any(kind == 'buffer_sizing' and 16 in budgets)
    facts.install.version == '0.5.10' or not buffers.flagged.any()
    rerun.outcome in ['ok', 'degraded']

Grammar (no eval, no attribute access on Python objects; values are plain JSON-like data):

    expr    := or
    or      := and ('or' and)*
    and     := not ('and' not)*
    not     := 'not' not | cmp
    cmp     := operand (('=='|'!='|'<'|'<='|'>'|'>='|'in'|'not' 'in') operand)?
    operand := literal | list | path | '(' expr ')'
    path    := NAME ('.' NAME | '[' INT ']' | '.' METHOD '(' [expr] ')')*
    METHOD  := any | all | none | count       (on lists; the argument is evaluated per item)

Inside a method's argument, names are looked up in the item first (when it is a mapping),
then outside; `it` is the item itself. `null` propagates through field access (a skipped
step's result is null), a missing field is an error naming the fields there are.
"""
from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Union

METHODS = ("any", "all", "none", "count")
_KEYWORDS = {"and", "or", "not", "in", "true", "false", "null", "none"}
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>-?\d+(?:\.\d+)?)
  | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>==|!=|<=|>=|<|>|\(|\)|\[|\]|\.|,)
""", re.VERBOSE)


class ExprError(ValueError):
    """A syntax or evaluation error; `col` is the 1-based column in the expression."""

    def __init__(self, message: str, col: int | None = None) -> None:
        self.col = col
        super().__init__(message + (f" (column {col})" if col else ""))


@dataclass(frozen=True)
class Lit:
    value: Any


@dataclass(frozen=True)
class ListLit:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Step:
    """One link of a path: a field, an index, or a method call with its per-item argument."""

    kind: str  # field | index | call
    name: str = ""
    index: int = 0
    arg: Node | None = None


@dataclass(frozen=True)
class Path:
    root: str
    steps: tuple[Step, ...]
    col: int

    @property
    def text(self) -> str:
        out = self.root
        for s in self.steps:
            out += f"[{s.index}]" if s.kind == "index" else f".{s.name}" + (
                "(...)" if s.kind == "call" else "")
        return out


@dataclass(frozen=True)
class Not:
    item: Node


@dataclass(frozen=True)
class BoolOp:
    op: str
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Cmp:
    op: str
    left: Node
    right: Node
    col: int


Node = Union[Lit, ListLit, Path, Not, BoolOp, Cmp]


def _tokens(src: str) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if not m:
            raise ExprError(f"unexpected character {src[pos]!r}", pos + 1)
        kind = m.lastgroup or ""
        if kind != "ws":
            out.append((kind, m.group(), pos + 1))
        pos = m.end()
    out.append(("end", "", len(src) + 1))
    return out


MAX_EXPR_CHARS = 10_000
MAX_DEPTH = 100  # parentheses, brackets, `not`s and method calls nested in one another


class _Parser:
    def __init__(self, src: str) -> None:
        if len(src) > MAX_EXPR_CHARS:
            raise ExprError(f"expression longer than {MAX_EXPR_CHARS} characters")
        self.toks = _tokens(src)
        self.i = 0
        self.depth = 0

    def _deeper(self, col: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError(f"nested deeper than {MAX_DEPTH} levels", col)

    def peek(self, value: str | None = None, kind: str | None = None) -> bool:
        k, v, _ = self.toks[self.i]
        return (value is None or v == value) and (kind is None or k == kind)

    def take(self, value: str | None = None, kind: str | None = None) -> tuple[str, str, int]:
        tok = self.toks[self.i]
        if not self.peek(value, kind):
            want = repr(value) if value else kind
            got = repr(tok[1]) if tok[1] else "the end"
            raise ExprError(f"expected {want}, found {got}", tok[2])
        self.i += 1
        return tok

    def parse(self) -> Node:
        node = self.or_()
        if not self.peek(kind="end"):
            k, v, col = self.toks[self.i]
            raise ExprError(f"unexpected {v!r}", col)
        return node

    def or_(self) -> Node:
        items = [self.and_()]
        while self.peek("or", "name"):
            self.take()
            items.append(self.and_())
        return items[0] if len(items) == 1 else BoolOp("or", tuple(items))

    def and_(self) -> Node:
        items = [self.not_()]
        while self.peek("and", "name"):
            self.take()
            items.append(self.not_())
        return items[0] if len(items) == 1 else BoolOp("and", tuple(items))

    def not_(self) -> Node:
        if self.peek("not", "name"):
            _, _, col = self.take()
            self._deeper(col)
            node = Not(self.not_())
            self.depth -= 1
            return node
        return self.cmp()

    def cmp(self) -> Node:
        left = self.operand()
        k, v, col = self.toks[self.i]
        if k == "op" and v in ("==", "!=", "<", "<=", ">", ">="):
            self.take()
            return Cmp(v, left, self.operand(), col)
        if k == "name" and v == "in":
            self.take()
            return Cmp("in", left, self.operand(), col)
        if k == "name" and v == "not" and self.toks[self.i + 1][1] == "in":
            self.take()
            self.take()
            return Cmp("not in", left, self.operand(), col)
        return left

    def operand(self) -> Node:
        k, v, col = self.toks[self.i]
        if k == "num":
            self.take()
            return Lit(_number(v, col))
        if k == "str":
            self.take()
            return Lit(re.sub(r"\\(.)", r"\1", v[1:-1]))
        if v == "(":
            self.take()
            self._deeper(col)
            node = self.or_()
            self.take(")")
            self.depth -= 1
            return node
        if v == "[":
            self.take()
            self._deeper(col)
            items: list[Node] = []
            while not self.peek("]"):
                items.append(self.or_())
                if not self.peek("]"):
                    self.take(",")
            self.take("]")
            self.depth -= 1
            return ListLit(tuple(items))
        if k == "name":
            if v in ("true", "false"):
                self.take()
                return Lit(v == "true")
            if v in ("null", "none"):
                self.take()
                return Lit(None)
            if v in _KEYWORDS:
                raise ExprError(f"unexpected {v!r}", col)
            return self.path()
        raise ExprError(f"expected a value, found {v!r}" if v else "expected a value", col)

    def path(self) -> Path:
        _, root, col = self.take(kind="name")
        steps: list[Step] = []
        while True:
            if self.peek("."):
                self.take()
                _, name, ncol = self.take(kind="name")
                if self.peek("("):
                    if name not in METHODS:
                        raise ExprError(f"unknown method {name!r} (methods: "
                                        f"{', '.join(METHODS)})", ncol)
                    self.take()
                    self._deeper(ncol)
                    arg = None if self.peek(")") else self.or_()
                    self.take(")")
                    self.depth -= 1
                    steps.append(Step("call", name, arg=arg))
                else:
                    steps.append(Step("field", name))
            elif self.peek("["):
                self.take()
                _, num, ncol = self.take(kind="num")
                if "." in num:
                    raise ExprError("an index is a whole number", ncol)
                self.take("]")
                steps.append(Step("index", index=int(_number(num, ncol))))
            else:
                return Path(root, tuple(steps), col)


MAX_NUMBER_CHARS = 40


def _number(v: str, col: int) -> int | float:
    """A number literal; one of more than MAX_NUMBER_CHARS characters is refused (Python would
    refuse an int() of thousands of digits with a ValueError, and no playbook needs one)."""
    if len(v) > MAX_NUMBER_CHARS:
        raise ExprError(f"a number of more than {MAX_NUMBER_CHARS} characters", col)
    return float(v) if "." in v else int(v)


def parse(src: str) -> Node:
    """Parse an expression; raises ExprError with the column of the problem."""
    if not src.strip():
        raise ExprError("empty expression")
    return _Parser(src).parse()


def parse_path(src: str) -> Path:
    """Parse `name.field[0]...` (a `${...}` reference); nothing else is allowed there."""
    node = parse(src)
    if not isinstance(node, Path):
        raise ExprError("only a name or a path (name.field) may appear inside ${...}")
    return node


def root_names(node: Node) -> set[str]:
    """Names the expression looks up in the outer scope (method arguments excluded: those
    names may be fields of each item)."""
    if isinstance(node, Path):
        return {node.root} if node.root != "it" else set()
    if isinstance(node, Not):
        return root_names(node.item)
    if isinstance(node, BoolOp):
        return set().union(*(root_names(x) for x in node.items))
    if isinstance(node, Cmp):
        return root_names(node.left) | root_names(node.right)
    if isinstance(node, ListLit):
        return set().union(*(root_names(x) for x in node.items)) if node.items else set()
    return set()


def _lookup(name: str, scopes: tuple[Any, ...], col: int) -> Any:
    if name == "it" and len(scopes) > 1:  # inside a method call: the item itself
        return scopes[0]
    for s in scopes:
        if isinstance(s, Mapping) and name in s:
            return s[name]
    outer = scopes[-1] if scopes and isinstance(scopes[-1], Mapping) else {}
    raise ExprError(f"unknown name {name!r} (known: {', '.join(sorted(map(str, outer))) or '-'})",
                    col)


def _field(value: Any, name: str, where: str, col: int) -> Any:
    if value is None:
        return None
    if isinstance(value, Mapping):
        if name in value:
            return value[name]
        raise ExprError(f"{where} has no field {name!r} (fields: "
                        f"{', '.join(sorted(map(str, value))) or '-'})", col)
    raise ExprError(f"{where} is a {_type(value)}, it has no field {name!r}", col)


def _type(v: Any) -> str:
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "list",
            dict: "mapping", type(None): "null"}.get(type(v), type(v).__name__)


def _eval_path(p: Path, scopes: tuple[Any, ...]) -> Any:
    value = _lookup(p.root, scopes, p.col)
    where = p.root
    for s in p.steps:
        if s.kind == "field":
            value = _field(value, s.name, where, p.col)
            where += f".{s.name}"
        elif s.kind == "index":
            if value is None:
                return None
            if not isinstance(value, (list, tuple)):
                raise ExprError(f"{where} is a {_type(value)}, not a list", p.col)
            value = value[s.index] if -len(value) <= s.index < len(value) else None
            where += f"[{s.index}]"
        else:
            items = [] if value is None else value
            if isinstance(items, Mapping):
                items = list(items.values())
            if not isinstance(items, (list, tuple)):
                raise ExprError(f"{where} is a {_type(value)}; .{s.name}() needs a list", p.col)
            if s.arg is not None:
                hits = [bool(evaluate(s.arg, (it,) + scopes)) for it in items]
            else:  # .count() counts items, .any() / .all() test their truth
                hits = [True if s.name == "count" else bool(it) for it in items]
            value = {"any": any(hits), "all": all(hits), "none": not any(hits),
                     "count": sum(hits)}[s.name]
            where += f".{s.name}()"
    return value


def _compare(op: str, a: Any, b: Any, col: int) -> bool:
    if op == "==":
        return bool(a == b)
    if op == "!=":
        return bool(a != b)
    if op in ("in", "not in"):
        if b is None:
            found = False
        elif isinstance(b, (list, tuple, str, Mapping)):
            if isinstance(b, str) and not isinstance(a, str):
                raise ExprError(f"'in' a string needs a string on the left, not a {_type(a)}",
                                col)
            found = a in b
        else:
            raise ExprError(f"'in' needs a list, string or mapping on the right, not a "
                            f"{_type(b)}", col)
        return found if op == "in" else not found
    if a is None or b is None:
        return False
    num = (int, float)
    if not ((isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool)
             and not isinstance(b, bool)) or (isinstance(a, str) and isinstance(b, str))):
        raise ExprError(f"cannot order a {_type(a)} and a {_type(b)} with {op}", col)
    return bool(_ORDER[op](a, b))


_ORDER: dict[str, Callable[[Any, Any], Any]] = {"<": operator.lt, "<=": operator.le,
                                                ">": operator.gt, ">=": operator.ge}


def evaluate(node: Node, scopes: tuple[Any, ...] | Mapping[str, Any]) -> Any:
    """Evaluate against plain data; `scopes` innermost first (a mapping is one scope)."""
    sc = (scopes,) if isinstance(scopes, Mapping) else scopes
    if isinstance(node, Lit):
        return node.value
    if isinstance(node, ListLit):
        return [evaluate(x, sc) for x in node.items]
    if isinstance(node, Path):
        return _eval_path(node, sc)
    if isinstance(node, Not):
        return not evaluate(node.item, sc)
    if isinstance(node, BoolOp):
        if node.op == "and":
            return all(evaluate(x, sc) for x in node.items)
        return any(evaluate(x, sc) for x in node.items)
    if isinstance(node, Cmp):
        return _compare(node.op, evaluate(node.left, sc), evaluate(node.right, sc), node.col)
    raise ExprError(f"cannot evaluate {node!r}")  # pragma: no cover - the parser makes none
