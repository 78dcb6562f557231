"""Evaluate a resolved size expression: elements for given sizing variables, bytes per dtype.

Only integer arithmetic and a few size helpers (max, min, cdiv...) are evaluated; anything else
is reported as unknown, with the names that would be needed (e.g. `num_head`).
"""
from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

DTYPE_BYTES: dict[str, int] = {
    "float64": 8, "double": 8, "int64": 8, "long": 8, "uint64": 8, "complex64": 8,
    "float32": 4, "float": 4, "int32": 4, "int": 4, "uint32": 4, "tf32": 4,
    "float16": 2, "half": 2, "bfloat16": 2, "int16": 2, "short": 2, "uint16": 2,
    "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
}


def dtype_bytes(dtype: str | None, allocator: str) -> tuple[int | None, str]:
    """Bytes per element and the dtype name used (torch's default when none is given)."""
    if dtype is None:
        fn = allocator.rsplit(".", 1)[-1]
        if fn == "arange":
            return 8, "int64 (default)"
        if fn.endswith("_like") or fn.startswith("new_"):
            return None, "same as source"
        return 4, "float32 (default)"
    name = dtype.rsplit(".", 1)[-1]
    return DTYPE_BYTES.get(name), name


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


_FUNCS: dict[str, Callable[..., Any]] = {
    "max": max, "min": min, "int": int, "abs": abs, "cdiv": _cdiv, "ceil": math.ceil,
    "ceil_div": _cdiv, "div_up": _cdiv,
    "next_power_of_2": lambda n: 1 << (int(n) - 1).bit_length()}


class _Unknown(Exception):
    def __init__(self, names: set[str]) -> None:
        super().__init__(", ".join(sorted(names)))
        self.names = names


def evaluate(node: ast.expr, env: Mapping[str, int | float]) -> tuple[int | None, tuple[str, ...]]:
    """Evaluate an integer expression; (None, missing names) when something is unknown."""
    try:
        v = _ev(node, env)
    except _Unknown as e:
        return None, tuple(sorted(e.names))
    except (ZeroDivisionError, OverflowError, ValueError, TypeError):
        return None, ()
    if isinstance(v, float):
        if not v.is_integer():
            return None, ()
        v = int(v)
    return int(v), ()


Value = int | float
Env = Mapping[str, Value]


def _ev(node: ast.AST, env: Env) -> Value:
    handler = _HANDLERS.get(type(node))
    if handler is None:
        raise _Unknown({ast.unparse(node)})
    return handler(node, env)


def _ev_all(nodes: Sequence[ast.expr], env: Env) -> list[Value]:
    """Every value, or _Unknown naming everything missing in any of them."""
    missing: set[str] = set()
    vals: list[Value] = []
    for n in nodes:
        try:
            vals.append(_ev(n, env))
        except _Unknown as e:
            missing |= e.names
    if missing:
        raise _Unknown(missing)
    return vals


def _ev_constant(node: ast.Constant, env: Env) -> Value:
    if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    raise _Unknown({ast.unparse(node)})


def _ev_name(node: ast.Name, env: Env) -> Value:
    if node.id in env:
        return env[node.id]
    raise _Unknown({node.id})


def _ev_unary(node: ast.UnaryOp, env: Env) -> Value:
    if not isinstance(node.op, (ast.USub, ast.UAdd)):
        raise _Unknown({ast.unparse(node)})
    v = _ev(node.operand, env)
    return -v if isinstance(node.op, ast.USub) else v


def _pow(a: Value, b: Value) -> Value:
    if b < 64:
        return a ** b
    raise TypeError("unsupported operator")


def _lshift(a: Value, b: Value) -> Value:
    if b < 64:
        return int(a) << int(b)
    raise TypeError("unsupported operator")


_BINOPS: dict[type[ast.operator], Callable[[Value, Value], Value]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Div: operator.truediv, ast.Mod: operator.mod,
    ast.Pow: _pow, ast.LShift: _lshift,
}


def _ev_binop(node: ast.BinOp, env: Env) -> Value:
    a, b = _ev_all((node.left, node.right), env)
    op = _BINOPS.get(type(node.op))
    if op is None:
        raise TypeError("unsupported operator")
    return op(a, b)


def _ev_call(node: ast.Call, env: Env) -> Value:
    fname = node.func.attr if isinstance(node.func, ast.Attribute) else (
        node.func.id if isinstance(node.func, ast.Name) else None)
    fn = _FUNCS.get(fname or "")
    if fn is None or node.keywords:
        raise _Unknown({f"{ast.unparse(node.func)}()"})
    value: Value = fn(*_ev_all(node.args, env))
    return value


def _ev_boolop(node: ast.BoolOp, env: Env) -> Value:
    if not isinstance(node.op, ast.Or):
        raise _Unknown({ast.unparse(node)})
    for v in node.values:  # the first truthy value, as Python does
        x = _ev(v, env)
        if x:
            return x
    return x


def _ev_ifexp(node: ast.IfExp, env: Env) -> Value:
    a, b = _ev(node.body, env), _ev(node.orelse, env)
    if a == b:
        return a
    raise _Unknown({f"if {ast.unparse(node.test)}"})


_HANDLERS: dict[type[ast.AST], Callable[[Any, Env], Value]] = {
    ast.Constant: _ev_constant, ast.Name: _ev_name, ast.UnaryOp: _ev_unary,
    ast.BinOp: _ev_binop, ast.Call: _ev_call, ast.BoolOp: _ev_boolop, ast.IfExp: _ev_ifexp,
}


def count_elements(shape: ast.expr, kind: str, env: Mapping[str, int | float]
                   ) -> tuple[int | None, tuple[str, ...]]:
    """Elements of an allocation from its resolved size expression."""
    if kind == "arange":
        if isinstance(shape, ast.Tuple):
            parts = list(shape.elts) + [ast.Constant(1)] * (3 - len(shape.elts))
            start, end, step = parts[:3]
            s, m1 = evaluate(start, env)
            e, m2 = evaluate(end, env)
            st, m3 = evaluate(step, env)
            if s is None or e is None or st is None or st == 0:
                return None, tuple(sorted(set(m1 + m2 + m3)))
            return max(0, _cdiv(e - s, st)), ()
        return evaluate(shape, env)
    if kind != "dims":
        return None, ()
    dims = shape.elts if isinstance(shape, (ast.Tuple, ast.List)) else [shape]
    total, missing = 1, set()
    for d in dims:
        v, m = evaluate(d, env)
        if v is None:
            missing |= set(m) or {ast.unparse(d)}
        else:
            total *= v
    if missing:
        return None, tuple(sorted(missing))
    return total, ()
