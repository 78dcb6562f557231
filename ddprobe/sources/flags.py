"""The launch flags an install defines, read from its `srt/server_args.py` with `ast`.

Two ways SGLang declares flags, both read by `flagsrc.parse_flags`:
- `parser.add_argument("--x", "--alias", type=int, choices=[...], action=..., nargs=...)`
  (every release up to 0.5.x; `choices=SOME_CONSTANT` is resolved from module constants);
- annotated fields `name: A[T, "help"]` / `A[T, Arg(cli_name=..., aliases=[...], choices=...)]`
  in namespace classes (`_NS_PATH = ...`) registered by `add_cli_args_from_dataclass` (0.5.2x).

`FlagSet.check(argv)` refuses, before any restart, a flag this version does not define (naming
the nearest valid one) and a value outside a flag's choices. SGLang's parser accepts unambiguous
prefixes (argparse's allow_abbrev), which would silently turn a removed `--x` into `--x-y`; the
check refuses those too.
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ddprobe.errors import RefusedError
from ddprobe.sources.determinism import NONE, Determinism

SERVER_ARGS = "srt/server_args.py"
_NO_VALUE_ACTIONS = frozenset({"store_true", "BooleanOptionalAction", "store_false",
                               "store_const", "count", "help", "version", "append_const"})


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]  # every spelling, the canonical one first
    dest: str
    file: str
    line: int
    action: str | None = None
    type: str | None = None
    choices: tuple[str, ...] | None = None  # None: not declared or not resolvable statically
    nargs: str | None = None
    default: str | None = None  # as written
    required: bool = False
    help: str = ""
    deprecated: bool = False

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def takes_value(self) -> bool:
        if self.action is None or self.action in ("store", "append", "extend"):
            return self.nargs != "0"
        if self.action in _NO_VALUE_ACTIONS:
            return False
        low = self.action.lower()
        # custom actions (e.g. DeprecatedStoreTrueAction): judged by their name
        return not any(w in low for w in ("storetrue", "store_true", "storefalse", "const",
                                          "booleanoptional"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FlagSet:
    flags: tuple[Flag, ...]
    package: str = ""
    version: str | None = None
    source: str = SERVER_ARGS
    # its --enable-deterministic-inference and the backends that support it (determinism.py)
    deterministic: Determinism = field(default=NONE, compare=False)

    def _index(self) -> dict[str, Flag]:
        idx: dict[str, Flag] = {}
        for f in self.flags:
            for n in f.names:
                idx.setdefault(n, f)
        return idx

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._index()))

    def get(self, name: str) -> Flag | None:
        return self._index().get(name)

    def has(self, name: str) -> bool:
        return name in self._index()

    def pick(self, *spellings: str) -> str | None:
        """The first spelling this version defines (spelling drift across releases)."""
        idx = self._index()
        for s in spellings:
            if s in idx:
                return s
        return None

    def nearest(self, name: str, n: int = 3) -> list[str]:
        names = list(self._index())
        close = difflib.get_close_matches(name, names, n=n, cutoff=0.6)
        if not close:
            stem = name.lstrip("-").split("-")
            close = [x for x in names if all(w in x for w in stem if len(w) > 3)][:n]
        return close

    def _what(self) -> str:
        v = f" {self.version}" if self.version else ""
        return f"{self.package or 'the package'}{v} ({self.source})"

    def check(self, argv: Sequence[str]) -> None:
        """Raise RefusedError for the first flag or value this version would not accept."""
        idx = self._index()
        i = 0
        while i < len(argv):
            tok = argv[i]
            if not tok.startswith("-") or tok in ("-", "--"):
                raise RefusedError(f"unexpected argument {tok!r} (not after a flag that takes a "
                                   f"value) for {self._what()}")
            name, eq, inline = tok.partition("=")
            flag = idx.get(name)
            if flag is None:
                raise RefusedError(self._unknown(name, idx))
            if not flag.takes_value:
                if eq:
                    raise RefusedError(f"{name} is a switch in {self._what()}; it takes no value"
                                       f" (got {tok!r})")
                i += 1
                continue
            if eq:
                values = [inline]
                i += 1
            else:
                values, i = _take_values(argv, i + 1, flag.nargs)
                if not values and flag.nargs not in ("?", "*"):
                    raise RefusedError(f"{name} needs a value in {self._what()}")
            for v in values:
                self._check_value(flag, name, v)

    def _unknown(self, name: str, idx: Mapping[str, Flag]) -> str:
        prefixed = sorted(n for n in idx if n.startswith(name) and n.startswith("--"))
        near = self.nearest(name)
        msg = f"{name} is not a flag of {self._what()}"
        if len(prefixed) == 1:
            msg += (f"; the server's argparse would silently take it as an abbreviation of "
                    f"{prefixed[0]}")
        elif len(prefixed) > 1:
            msg += f"; it is an ambiguous prefix of {', '.join(prefixed[:4])}"
        if near:
            msg += f"; nearest: {', '.join(near)}"
        return msg

    def _check_value(self, flag: Flag, name: str, value: str) -> None:
        if flag.choices is not None and value not in flag.choices:
            near = difflib.get_close_matches(value, list(flag.choices), n=1, cutoff=0.5)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            shown = ", ".join(flag.choices[:12]) + (" ..." if len(flag.choices) > 12 else "")
            raise RefusedError(f"{name} {value!r} is not one of its choices in {self._what()}: "
                               f"{shown}{hint}")
        if flag.type in ("int", "float") and flag.choices is None:
            try:
                (int if flag.type == "int" else float)(value)
            except ValueError:
                raise RefusedError(f"{name} takes an {flag.type} in {self._what()}, got "
                                   f"{value!r}") from None

    def to_dict(self) -> dict[str, Any]:
        return {"package": self.package, "version": self.version, "source": self.source,
                "flags": [f.to_dict() for f in self.flags],
                "deterministic": self.deterministic.to_dict()}


def _take_values(argv: Sequence[str], i: int, nargs: str | None) -> tuple[list[str], int]:
    def is_value(t: str) -> bool:
        return not t.startswith("-") or _is_number(t)

    if nargs in (None, "1"):
        if i < len(argv) and is_value(argv[i]):
            return [argv[i]], i + 1
        return [], i
    if nargs == "?":
        if i < len(argv) and is_value(argv[i]):
            return [argv[i]], i + 1
        return [], i
    if nargs is not None and nargs.isdecimal() and len(nargs) <= 6:  # int() takes these
        n = int(nargs)
        return list(argv[i:i + n]), i + n
    vals: list[str] = []
    while i < len(argv) and is_value(argv[i]):
        vals.append(argv[i])
        i += 1
    return vals, i


def _is_number(t: str) -> bool:
    try:
        float(t)
        return True
    except ValueError:
        return False
