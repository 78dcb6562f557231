"""The action registry: what a playbook step may call, its arguments, and how it is bound.

The built-in actions (builtin.py) call the library functions they import. An extension action
may instead name the functions it needs as "module:function" (`ActionSpec.targets`): they are
imported only when checked or run, so a missing module gives "step N: action X not available:
..." before anything runs, never an ImportError when ddprobe starts.
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddprobe.errors import DdprobeError
from ddprobe.intlist import parse_ints

if TYPE_CHECKING:
    from ddprobe.playbook.context import StepContext

KINDS = ("str", "int", "float", "bool", "ints", "strs", "any")


class ActionUnavailable(DdprobeError):
    """The library function an action needs cannot be found or bound."""


@dataclass(frozen=True)
class Arg:
    name: str
    kind: str = "str"  # one of KINDS
    required: bool = False
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] = ()  # a vocabulary's values (typing.get_args of its Literal)


@dataclass(frozen=True)
class ActionResult:
    data: Any  # plain JSON-like data: what `register:` names and conditions read
    summary: str  # one line for the progress view and the run's notes


@dataclass(frozen=True)
class ActionSpec:
    name: str
    help: str
    targets: tuple[str, ...]  # "module:function" an extension action needs (built-ins: ())
    run: Callable[[StepContext, dict[str, Any]], ActionResult]
    args: tuple[Arg, ...] = ()
    mutates: bool = False  # restarts a server or changes files on the host

    def arg(self, name: str) -> Arg | None:
        return next((a for a in self.args if a.name == name), None)

    def unavailable(self) -> str | None:
        """None when every target imports and exists, else why not (one line)."""
        for t in self.targets:
            try:
                resolve(t)
            except ActionUnavailable as e:
                return str(e)
        return None


@dataclass
class ActionRegistry:
    actions: dict[str, ActionSpec] = field(default_factory=dict)

    def register(self, spec: ActionSpec) -> None:
        self.actions[spec.name] = spec

    def get(self, name: str) -> ActionSpec | None:
        return self.actions.get(name)

    def names(self) -> list[str]:
        return sorted(self.actions)

    def suggest(self, name: str) -> str:
        near = difflib.get_close_matches(name, self.names(), n=1)
        return f"; did you mean '{near[0]}'?" if near else ""

    def copy(self) -> ActionRegistry:
        return ActionRegistry(dict(self.actions))


def resolve(target: str) -> Callable[..., Any]:
    """'pkg.module:function' -> the function; ActionUnavailable says what is missing."""
    mod_name, _, attr = target.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        raise ActionUnavailable(f"{target}: module {e.name} is not installed") from None
    except Exception as e:
        raise ActionUnavailable(f"{target}: cannot import {mod_name}: "
                                f"{type(e).__name__}: {e}") from None
    fn: object = getattr(mod, attr, None)
    if not callable(fn):
        raise ActionUnavailable(f"{target}: {mod_name} has no function {attr!r}")
    return fn


def bind_call(fn: Callable[..., Any], provided: Mapping[str, Any],
              aliases: Mapping[str, Iterable[str]] | None = None) -> Any:
    """Call `fn` with the values it asks for by name; every other parameter must have a default.

    The playbook binds library functions by parameter name (`host`, `config`, `budgets`, ...)
    so that keyword-only options added later never break a playbook.
    """
    sig = inspect.signature(fn)
    names = dict(provided)
    for canon, alts in (aliases or {}).items():
        if canon in provided:
            for a in alts:
                names.setdefault(a, provided[canon])
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in names and names[p.name] is not None:
            value = names[p.name]
            if p.kind == p.POSITIONAL_ONLY:
                args.append(value)
            else:
                kwargs[p.name] = value
        elif p.default is p.empty:
            raise ActionUnavailable(
                f"{fn.__module__}.{fn.__qualname__}() needs {p.name!r}, which a playbook "
                f"step cannot provide (it provides: {', '.join(sorted(provided))})")
    return fn(*args, **kwargs)


def _to_str(value: Any) -> str:
    if isinstance(value, (dict, list)):
        raise ValueError(f"expected a string, got a {type(value).__name__}")
    return str(value)


_TRUE, _FALSE = ("true", "yes", "on"), ("false", "no", "off")


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
        return value.lower() in _TRUE
    raise ValueError(f"expected true or false, got {value!r}")


def _number(kind: str) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {value!r}")
        try:
            return int(value) if kind == "int" else float(value)
        except (TypeError, ValueError):
            raise ValueError(f"expected {'a whole number' if kind == 'int' else 'a number'}, "
                             f"got {value!r}") from None
    return convert


def _to_ints(value: Any) -> list[int]:
    """A YAML list of whole numbers or the command line's text (`8,16,32`), by the command
    line's rules (ddprobe/intlist.py: positive integers, at least one)."""
    if isinstance(value, list):
        value = ",".join(str(coerce("int", x)) for x in value)
    return list(parse_ints(str(value)))  # IntListError is a ValueError


def _to_strs(value: Any) -> list[str]:
    if isinstance(value, list):
        return [_to_str(x) for x in value]
    return shlex.split(str(value))


_COERCE: dict[str, Callable[[Any], Any]] = {
    "str": _to_str, "bool": _to_bool, "int": _number("int"), "float": _number("float"),
    "ints": _to_ints, "strs": _to_strs}


def coerce(kind: str, value: Any) -> Any:
    """A YAML or --var value as the argument kind; ValueError says what was expected."""
    if value is None or kind == "any":
        return value
    convert = _COERCE.get(kind)
    if convert is None:  # pragma: no cover
        raise ValueError(f"unknown argument kind {kind!r}")
    return convert(value)


def to_plain(obj: Any, depth: int = 0) -> Any:
    """Library results -> plain JSON-like data (what conditions and the journal see)."""
    if depth > 40:
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, Mapping):
        return {str(k): to_plain(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_plain(v, depth + 1) for v in obj]
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_plain(to_dict(), depth + 1)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name), depth + 1)
                for f in dataclasses.fields(obj) if f.repr}
    return str(obj)
