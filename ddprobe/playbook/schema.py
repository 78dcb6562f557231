"""Load and check a playbook file: every error names the file and line, before anything runs.

    name: seed investigation
    vars: {budgets: "8,16,32,64", patch: ddtestbed-custom-mask}
    steps:
      - action: bisect
        with: {budgets: "${budgets}"}
        register: bisect
      - action: patch-apply
        when: bisect.verdicts.any(kind == 'buffer_sizing')
        with: {patch: "${patch}"}

`${name}` takes a variable (or `host.<field>`) when the file is loaded; `${step.path}` takes a
registered step result when that step runs. A whole-string `${x}` keeps its type (a list stays
a list); inside other text it is interpolated (a list as "8,16,32"). `$$` is a literal `$`.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml

from ddprobe.errors import ConfigError
from ddprobe.inventory import Host
from ddprobe.playbook import expr
from ddprobe.playbook.actions import ActionRegistry, ActionSpec, coerce
from ddprobe.yamlio import LineDict, load_yaml

TOP_KEYS = ("name", "description", "vars", "steps")
MAX_VALUE_CHARS = 1 << 20
STEP_KEYS = ("name", "action", "with", "when", "assert", "register", "ignore_errors")
RESERVED = {"host", "result", "it", "vars", "and", "or", "not", "in", "true", "false", "null",
            "none"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_REF = re.compile(r"\$\$|\$\{([^}]*)\}")


@dataclass(frozen=True)
class Template:
    """An argument that reads a registered step result; rendered when its step runs."""

    text: str
    parts: tuple[Union[str, expr.Path], ...]
    kind: str
    line: int

    def render(self, scope: Mapping[str, Any]) -> Any:
        if len(self.parts) == 1 and isinstance(self.parts[0], expr.Path):
            return expr.evaluate(self.parts[0], scope)
        return "".join(p if isinstance(p, str) else interpolate(expr.evaluate(p, scope))
                       for p in self.parts)


@dataclass(frozen=True)
class StepSpec:
    index: int  # 1-based
    name: str
    action: str
    args: dict[str, Any]  # final values, or Template for those that read step results
    when: str | None
    when_node: expr.Node | None
    asserts: tuple[tuple[str, expr.Node], ...]
    register: str | None
    ignore_errors: bool
    line: int
    spec: ActionSpec = field(repr=False, compare=False)

    @property
    def label(self) -> str:
        return f"step {self.index} '{self.name}'"


@dataclass(frozen=True)
class Playbook:
    path: str
    name: str
    description: str
    vars: dict[str, Any]
    steps: tuple[StepSpec, ...]
    builtins: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Value:
    value: Any


def _text(x: Any) -> str:
    return interpolate(x.value) if isinstance(x, _Value) else str(x)


def interpolate(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(interpolate(x) for x in v)
    return str(v)


def host_scope(host: Host) -> dict[str, Any]:
    s = host.server
    return {"name": host.name, "package": host.package, "transport": host.transport,
            "budget": s.budget, "max_bs": s.max_bs, "backend": s.backend, "port": s.port,
            "algorithm": s.algorithm,
            "labels": dict(host.labels)}


def parse_var_overrides(items: list[str]) -> dict[str, str]:
    """`--var k=v` words -> {k: v}."""
    out: dict[str, str] = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k.strip():
            raise ConfigError(f"--var takes NAME=VALUE, got {it!r}", key="--var")
        out[k.strip()] = v
    return out


class _Loader:
    def __init__(self, path: str, registry: ActionRegistry) -> None:
        self.path = path
        self.registry = registry

    def err(self, msg: str, line: int | None, key: str | None = None) -> ConfigError:
        return ConfigError(msg, path=self.path, line=line or None, key=key)

    def unknown_keys(self, d: LineDict, allowed: tuple[str, ...], what: str) -> None:
        for k in d:
            if k not in allowed:
                near = difflib.get_close_matches(str(k), allowed, n=1)
                hint = (f"; did you mean '{near[0]}'?" if near
                        else f" (allowed: {', '.join(allowed)})")
                raise self.err(f"unknown {what} key '{k}'{hint}", d.line_of(k))

    def subst(self, value: Any, scope: Mapping[str, Any], line: int, *, runtime: set[str],
              kind: str = "any", top: bool = True) -> Any:
        """Replace ${...} by values from `scope`; refs to `runtime` names make a Template."""
        if isinstance(value, list):
            return [self.subst(v, scope, line, runtime=runtime, top=False) for v in value]
        if isinstance(value, dict):
            return {k: self.subst(v, scope, line, runtime=runtime, top=False)
                    for k, v in value.items()}
        if not isinstance(value, str) or "$" not in value:
            return value
        parts: list[Any] = []  # literal text, resolved values, or Paths read at run time
        pos = 0
        for m in _REF.finditer(value):
            parts += [value[pos:m.start()], self.ref(m, scope, line, runtime)]
            pos = m.end()
        parts.append(value[pos:])
        return self.assemble(value, [x for x in parts if x != ""], line, kind, top)

    def ref(self, m: re.Match[str], scope: Mapping[str, Any], line: int, runtime: set[str]
            ) -> Any:
        """One `${...}` (or `$$`): "$", a _Value, or the Path of a step result."""
        if m.group(0) == "$$":
            return "$"
        try:
            p = expr.parse_path(m.group(1))
        except expr.ExprError as e:
            raise self.err(f"bad reference ${{{m.group(1)}}}: {e}", line) from None
        if p.root in runtime:
            return p
        if p.root not in scope:
            known = sorted(set(scope) | runtime)
            raise self.err(f"unknown variable '{p.root}' in ${{{m.group(1)}}} (known: "
                           f"{', '.join(known) or 'none'})", line)
        try:
            return _Value(expr.evaluate(p, scope))
        except expr.ExprError as e:
            raise self.err(f"${{{m.group(1)}}}: {e}", line) from None

    def assemble(self, value: str, parts: list[Any], line: int, kind: str, top: bool) -> Any:
        """The substituted value: a Template (step results), a whole value, or text."""
        whole = len(parts) == 1 and _REF.fullmatch(value) is not None and value != "$$"
        if any(isinstance(x, expr.Path) for x in parts):
            if not top:
                raise self.err("a step result can only be used as a whole argument value, "
                               "not inside a list or mapping", line)
            return Template(value, tuple(x if isinstance(x, expr.Path) else _text(x)
                                         for x in parts), kind, line)
        if whole and isinstance(parts[0], _Value):
            return parts[0].value  # a whole "${x}" keeps its type
        out = "".join(_text(x) for x in parts)
        if len(out) > MAX_VALUE_CHARS:  # `b: ${a}${a}`, `c: ${b}${b}`, ... doubles each line
            raise self.err(f"a value grows past {MAX_VALUE_CHARS} characters after "
                           "substitution (variables that repeat each other?)", line)
        return out

    def condition(self, text: Any, line: int, known: set[str], what: str) -> expr.Node:
        if isinstance(text, bool):
            text = "true" if text else "false"
        if not isinstance(text, str):
            raise self.err(f"{what} is a condition (a string), not {type(text).__name__}", line)
        if "${" in text:
            raise self.err(f"{what}: write names directly (e.g. `budgets`), not ${{...}}", line)
        try:
            node = expr.parse(text)
        except expr.ExprError as e:
            raise self.err(f"{what}: {e}: {text}", line) from None
        for name in sorted(expr.root_names(node)):
            if name not in known:
                near = difflib.get_close_matches(name, sorted(known), n=1)
                hint = f"; did you mean '{near[0]}'?" if near else ""
                raise self.err(f"{what}: unknown name '{name}' (variables and results "
                               f"registered before this step: {', '.join(sorted(known))}){hint}",
                               line)
        return node


def load_playbook(path: Path | str, host: Host, *, overrides: Mapping[str, str] | None = None,
                  registry: ActionRegistry | None = None, check_available: bool = True,
                  text: str | None = None) -> Playbook:
    """Parse and check a playbook for `host`; raise ConfigError (file:line) on any problem."""
    from ddprobe.playbook.builtin import builtin_registry

    p = str(path)
    reg = registry or builtin_registry()
    ld = _Loader(p, reg)
    doc = load_yaml(path, text)
    if not isinstance(doc, LineDict):
        raise ld.err("a playbook is a mapping with a `steps:` list", 1)
    ld.unknown_keys(doc, TOP_KEYS, "playbook")
    builtins = {"host": host_scope(host)}
    vars_ = _vars(ld, doc, builtins, dict(overrides or {}))
    steps = _steps(ld, doc, vars_, builtins, check_available)
    name = doc.get("name") or Path(p).stem
    return Playbook(p, str(name), str(doc.get("description") or ""), vars_, tuple(steps),
                    builtins)


def _vars(ld: _Loader, doc: LineDict, builtins: dict[str, Any], over: dict[str, str]
          ) -> dict[str, Any]:
    """`vars:` checked, `--var` overrides applied, references substituted in order."""
    raw_vars = doc.get("vars") or LineDict()
    if not isinstance(raw_vars, LineDict):
        raise ld.err("vars: must be a mapping of name: value", doc.line_of("vars"))
    for k in over:
        if k not in raw_vars:
            raise ConfigError(f"--var {k}: the playbook has no variable '{k}' (it has: "
                              f"{', '.join(map(str, raw_vars)) or 'none'})", path=ld.path,
                              key="--var")
    vars_: dict[str, Any] = {}
    for k, v in raw_vars.items():
        line = raw_vars.line_of(k)
        if not isinstance(k, str) or not _IDENT.match(k) or k in RESERVED:
            raise ld.err(f"bad variable name {k!r} (letters, digits, _; not one of "
                         f"{', '.join(sorted(RESERVED))})", line)
        if k in over:
            v = yaml.safe_load(over[k]) if over[k].strip() else ""
        vars_[k] = ld.subst(v, {**builtins, **vars_}, line, runtime=set())
    return vars_


def _steps(ld: _Loader, doc: LineDict, vars_: dict[str, Any], builtins: dict[str, Any],
           check_available: bool) -> list[StepSpec]:
    steps_raw = doc.get("steps")
    if not isinstance(steps_raw, list) or not steps_raw:
        raise ld.err("steps: must be a non-empty list of steps", doc.line_of("steps"))
    steps: list[StepSpec] = []
    registered: set[str] = set()
    base_line = doc.line_of("steps")
    for i, st in enumerate(steps_raw, 1):
        if not isinstance(st, LineDict):
            raise ld.err(f"step {i}: a step is a mapping with an `action:`", base_line)
        steps.append(_step(ld, i, st, vars_, builtins, registered, check_available))
        if steps[-1].register:
            registered.add(steps[-1].register)
    return steps


def _step(ld: _Loader, i: int, st: LineDict, vars_: dict[str, Any], builtins: dict[str, Any],
          registered: set[str], check_available: bool) -> StepSpec:
    ld.unknown_keys(st, STEP_KEYS, f"step {i}")
    scope = {**builtins, **vars_}
    action, spec = _action(ld, i, st)
    name = str(ld.subst(st.get("name") or action, scope, st.line_of("name"), runtime=set()))
    label = f"step {i} '{name}'"
    args = _step_args(ld, label, st, spec, scope, registered)
    known = set(scope) | registered
    when = st.get("when")
    when_node = (ld.condition(when, st.line_of("when"), known, f"{label}: when")
                 if when is not None else None)
    reg = _register(ld, label, st, registered, vars_)
    own = known | {"result"} | ({reg} if reg else set())
    asserts = tuple((str(t), ld.condition(t, st.line_of("assert"), own, f"{label}: assert"))
                    for t in _as_list(st.get("assert")))
    ign = st.get("ignore_errors", False)
    if not isinstance(ign, bool):
        raise ld.err(f"{label}: ignore_errors: must be true or false", st.line_of("ignore_errors"))
    why = spec.unavailable() if check_available else None
    if why:
        raise ld.err(f"{label}: action '{action}' not available: {why}", st.line_of("action"))
    return StepSpec(i, name, action, args, str(when) if when is not None else None, when_node,
                    asserts, reg, ign, st.line, spec)


def _as_list(v: Any) -> list[Any]:
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def _action(ld: _Loader, i: int, st: LineDict) -> tuple[str, ActionSpec]:
    action = st.get("action")
    if not isinstance(action, str) or not action:
        raise ld.err(f"step {i}: `action:` is required (one of: {', '.join(ld.registry.names())})",
                     st.line)
    spec = ld.registry.get(action)
    if spec is None:
        raise ld.err(f"step {i}: unknown action '{action}'{ld.registry.suggest(action)} "
                     f"(actions: {', '.join(ld.registry.names())})", st.line_of("action"))
    return action, spec


def _step_args(ld: _Loader, label: str, st: LineDict, spec: ActionSpec, scope: dict[str, Any],
               registered: set[str]) -> dict[str, Any]:
    """The step's `with:` checked against the action's arguments, defaults filled in."""
    with_ = st.get("with")
    if with_ is None:
        with_ = LineDict()
        with_.line, with_.key_lines = st.line, {}
    if not isinstance(with_, LineDict):
        raise ld.err(f"{label}: with: must be a mapping of argument: value", st.line_of("with"))
    args = {str(k): _arg_value(ld, label, spec, str(k), v, with_.line_of(k), scope, registered)
            for k, v in with_.items()}
    for a in spec.args:
        if a.name not in args:
            if a.required:
                raise ld.err(f"{label}: action '{spec.name}' needs argument '{a.name}'"
                             + (f" ({a.help})" if a.help else ""), with_.line or st.line)
            args[a.name] = a.default
    return args


def _arg_value(ld: _Loader, label: str, spec: ActionSpec, k: str, v: Any, line: int,
               scope: dict[str, Any], registered: set[str]) -> Any:
    a = spec.arg(k)
    if a is None:
        allowed = ", ".join(x.name for x in spec.args) or "none"
        near = difflib.get_close_matches(k, [x.name for x in spec.args], n=1)
        hint = f"; did you mean '{near[0]}'?" if near else ""
        raise ld.err(f"{label}: action '{spec.name}' has no argument '{k}'{hint} "
                     f"(arguments: {allowed})", line)
    val = ld.subst(v, scope, line, runtime=registered, kind=a.kind)
    if isinstance(val, Template):
        return val
    try:
        val = coerce(a.kind, val)
    except ValueError as e:
        raise ld.err(f"{label}: argument '{k}': {e}", line) from None
    if a.choices and val not in a.choices:
        raise ld.err(f"{label}: argument '{k}': unknown value {val!r} (known: "
                     f"{', '.join(a.choices)})", line)
    return val


def _register(ld: _Loader, label: str, st: LineDict, registered: set[str],
              vars_: dict[str, Any]) -> str | None:
    reg = st.get("register")
    if reg is None:
        return None
    if not isinstance(reg, str) or not _IDENT.match(reg) or reg in RESERVED:
        raise ld.err(f"{label}: register: {reg!r} is not a usable name (letters, digits, _;"
                     f" not one of {', '.join(sorted(RESERVED))})", st.line_of("register"))
    if reg in registered or reg in vars_:
        raise ld.err(f"{label}: register: '{reg}' is already "
                     f"{'a variable' if reg in vars_ else 'registered by an earlier step'}",
                     st.line_of("register"))
    return reg
