"""Which attention backends an install's `--enable-deterministic-inference` supports, read
from its source (statically, like the rest of ddprobe/sources/: nothing is imported).

SGLang's deterministic mode (batch-invariant ops: greedy output that does not depend on the
batch, the padding of a CUDA graph or the run) is defined per release; read from the real
wheels (0.4.10.post2, 0.5.1, 0.5.2, 0.5.4, 0.5.6.post2, 0.5.10, 0.5.11, 0.5.21, 0.5.22, 0.5.23):

  up to 0.5.2    no `--enable-deterministic-inference` flag at all;
  0.5.4-0.5.11   srt/server_args.py: `DETERMINISTIC_ATTENTION_BACKEND_CHOICES = ["flashinfer",
                 "fa3", "triton"]`; `_handle_deterministic_inference` refuses another backend
                 (ValueError); its "none given" fallback (flashinfer on Blackwell, else fa3)
                 does not fire in 0.5.11, whose default backend is picked first (line 849,
                 checked against the real ServerArgs: tests/test_real_sglang_args.py);
                 DeepSeek-architecture models only fa3/triton (0.5.6 on:
                 `RADIX_SUPPORTED_DETERMINISTIC_ATTENTION_BACKEND`);
  0.5.21-0.5.23  srt/arg_groups/choices.py: `["ascend", "fa3", "fa4", "flashinfer",
                 "intel_xpu", "triton"]` (the flag a field of the `exec.deterministic`
                 namespace); absorbed-MLA models `["ascend", "fa3", "fa4", "triton"]`.

A platform plugin may extend the list at run time (`add_deterministic_attention_backend_choices`):
the static list is what the release itself supports, and is said to be so.
"""
from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ddprobe.sources.pyparse import UNPARSABLE

FLAG: Final = "--enable-deterministic-inference"
CHOICES: Final = "DETERMINISTIC_ATTENTION_BACKEND_CHOICES"
# where releases define the list, newest layout first
WHERE: Final = ("srt/arg_groups/choices.py", "srt/server_args.py")


@dataclass(frozen=True)
class Determinism:
    """What an install's source says about its deterministic mode."""

    flag: bool  # the install defines --enable-deterministic-inference
    backends: tuple[str, ...] | None  # the attention backends it supports (None: not read)
    where: str = ""  # file:line of the list
    version: str | None = None
    known: bool = True  # False: the install's flags were not read (nothing is claimed)

    def supports(self, backend: str | None) -> bool:
        """Can a cell on `backend` (the server's resolved attention backend) run with the
        flag? False when the backend is unknown: the server would pick one itself, and the
        comparison must run on the backend the failing cell ran."""
        return self.flag and self.backends is not None and backend in self.backends

    def why_not(self, backend: str | None) -> str:
        v = f"SGLang {self.version}" if self.version else "the host's SGLang"
        if not self.known:
            return f"whether the host's SGLang has {FLAG} is read from its flags per host"
        if not self.flag:
            return f"{v} has no {FLAG} (added in 0.5.4)"
        if self.backends is None:
            return f"{v} defines {FLAG}, but its backend list ({CHOICES}) was not found"
        if backend is None:
            return "the cells' attention backend is not known (the preflight did not say)"
        return (f"{v} supports {FLAG} on {', '.join(self.backends)} only ({self.where}), "
                f"not on {backend}")

    def to_dict(self) -> dict[str, object]:
        backends = list(self.backends) if self.backends is not None else None
        return {"known": self.known, "flag": self.flag, "backends": backends,
                "where": self.where, "version": self.version}


# nothing read (no flags yet, or they could not be read): claims neither way
NONE: Final = Determinism(False, None, known=False)


def read(texts: Mapping[str, str], *, flag: bool, version: str | None = None) -> Determinism:
    """The install's deterministic mode from its sources (`flag`: the flag reader found the
    option)."""
    for path in WHERE:
        text = texts.get(path)
        if text is None:
            continue
        found = _list_const(text, CHOICES)
        if found is not None:
            names, line = found
            return Determinism(flag, names, f"{path}:{line}", version)
    return Determinism(flag, None, "", version)


def _list_const(text: str, name: str) -> tuple[tuple[str, ...], int] | None:
    """A module-level `NAME = ["a", "b"]` (strings only), and its line."""
    try:
        tree = ast.parse(text)
    except UNPARSABLE:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not (isinstance(target, ast.Name) and target.id == name):
            continue
        if isinstance(value, (ast.List, ast.Tuple)) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts):
            return tuple(str(e.value) for e in value.elts  # type: ignore[attr-defined]
                         ), node.lineno
    return None


__all__ = ["CHOICES", "Determinism", "FLAG", "NONE", "read"]
