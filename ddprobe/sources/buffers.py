"""grep-buffers: the buffers an install allocates for CUDA-graph capture/replay, and their sizes.

Pure: `analyse_buffers(texts, ...)` takes module texts keyed by package-relative path (as read
from the host in one round-trip, see `ddprobe.sources.remote_read`) and returns a
`BufferReport`. Nothing here imports the analysed package.
"""
from __future__ import annotations

import ast
import difflib
import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ddprobe.errors import UsageError
from ddprobe.sources.backends import ATTN, MODEL_RUNNER, backend_files, known_backends
from ddprobe.sources.bufeval import count_elements, dtype_bytes, evaluate
from ddprobe.sources.bufscan import Alloc, Assignment, ModuleScan, scan_module
from ddprobe.sources.bufsize import (
    CONTEXT,
    DRAFT,
    MAX_BS,
    SEQ,
    STEPS,
    TOPK,
    Resolved,
    Resolver,
)
from ddprobe.sources.bufuse import (
    Demand,
    Use,
    UseIndex,
    constructor_field,
    find_demands,
    find_uses,
)
from ddprobe.sources.reqlimit import LIMIT_FILES, SeqLimit, seq_limit

BACKEND_FILES: dict[str, tuple[str, ...]] = {
    "triton": (f"{ATTN}/triton_backend.py",),
    "flashinfer": (f"{ATTN}/flashinfer_backend.py",),
    "fa3": (f"{ATTN}/flashattention_backend.py",),
}
RUNNER_GLOBS: tuple[str, ...] = (
    "srt/model_executor/cuda_graph_runner.py",
    "srt/model_executor/runner/*cuda_graph_runner.py",
    "srt/speculative/*cuda_graph_runner.py",
)
# What a reader expects to find; a missing one becomes a "not found in this version" row.
EXPECTED: dict[str, tuple[str, ...]] = {
    f"{ATTN}/triton_backend.py": ("cuda_graph_custom_mask", "cuda_graph_kv_indices"),
    f"{ATTN}/flashinfer_backend.py": ("cuda_graph_custom_mask", "cuda_graph_kv_indices"),
    f"{ATTN}/flashattention_backend.py": ("decode_cuda_graph_metadata",),
    "srt/model_executor/cuda_graph_runner.py": ("custom_mask", "input_ids"),
}

# `self.x = name(...)` / `self.x: T = Name.create(...)`: the callee may build the buffer
_PRODUCER = re.compile(r"self\.\w+[ \t]*(?::[^=\n]*)?=[ \t]*([A-Za-z_]\w*)[ \t]*[.(]")
FLAG_FIXED = "fixed-size-growing-use"  # (a) size ignores the budget, an access grows with it
FLAG_NONE = "none-then-allocated"  # (b) set to None in one place, allocated in another
# the use's own layout needs more than is allocated at the longest seq_len a request reaches
FLAG_SHORT = "short-at-full-context"


@dataclass(frozen=True)
class SizingParams:
    max_bs: int | None = None
    budgets: tuple[int, ...] = ()
    context_len: int | None = None
    topk: int | None = None
    num_steps: int | None = None
    extra: tuple[tuple[str, int], ...] = ()
    # the longest seq_len is context_len - seq_below (the install's own limits, set by
    # analyse_buffers from sources.reqlimit; 0 = context_len)
    seq_below: int = 0

    def env(self, budget: int) -> dict[str, int]:
        env: dict[str, int] = {DRAFT: budget + 1}
        for k, v in ((MAX_BS, self.max_bs), (CONTEXT, self.context_len), (TOPK, self.topk),
                     (STEPS, self.num_steps)):
            if v is not None:
                env[k] = v
        if self.context_len is not None:
            env[SEQ] = self.context_len - self.seq_below
        env.update(dict(self.extra))
        return env


@dataclass(frozen=True)
class SizeAt:
    budget: int
    draft_tokens: int
    elements: int | None
    bytes: int | None
    demand_elements: int | None = None
    short_by: int | None = None  # elements the use's layout needs beyond the allocation
    missing: tuple[str, ...] = ()
    seq_len: int | None = None  # the seq_len the demand was evaluated at (the longest reachable)
    # short only at seq_len = context_len, which the release never reaches: not a suspect
    short_at_context: int | None = None


@dataclass(frozen=True)
class BufferRow:
    status: str  # found | missing-file | missing-buffer | parse-error
    attr: str
    file: str
    target: str = ""
    line: int | None = None
    scope: str = ""
    phase: str = ""  # init | capture | replay | per-batch | module
    allocator: str = ""
    shape: str = ""
    dtype: str | None = None
    conditions: tuple[str, ...] = ()
    resolved: str | None = None
    depends_on: tuple[str, ...] = ()
    free: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    none_sites: tuple[str, ...] = ()  # "file:line Class.func"
    growing_uses: tuple[str, ...] = ()  # "file:line func: statement"
    demand: str | None = None
    uses: tuple[str, ...] = ()  # every access found (growing or not), "file:line func: stmt"
    flags: tuple[str, ...] = ()
    sizes: tuple[SizeAt, ...] = ()
    message: str | None = None
    shape_span: tuple[int, int, int, int] | None = None
    via: str | None = None  # helper that allocates it, e.g. "maybe_create_verify_mask"

    @property
    def grows_with_budget(self) -> bool:
        return DRAFT in self.depends_on

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BufferReport:
    package: str
    version: str | None
    backend: str
    files: tuple[str, ...]
    rows: tuple[BufferRow, ...]
    params: SizingParams | None = None
    texts: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    notes: tuple[str, ...] = ()  # e.g. which classes the backend uses, by its hierarchy
    seq_limit: SeqLimit | None = None  # the longest seq_len the demands were evaluated at

    def find(self, attr: str) -> list[BufferRow]:
        return [r for r in self.rows if r.status == "found" and _matches(r, attr)]

    def to_dict(self) -> dict[str, Any]:
        return {"package": self.package, "version": self.version, "backend": self.backend,
                "files": list(self.files),
                "params": asdict(self.params) if self.params else None,
                "seq_limit": asdict(self.seq_limit) if self.seq_limit else None,
                "notes": list(self.notes), "rows": [r.to_dict() for r in self.rows]}


def _matches(row: BufferRow, name: str) -> bool:
    return name in (row.attr, row.target, f"{row.scope.split('.')[0]}.{row.attr}")


def wanted_files(backend: str) -> tuple[str, ...]:
    """Package-relative paths/globs to read for a backend (`all` = every known backend).

    A named backend reads every attention module and the backend registry: which of them it
    uses follows the class hierarchy (`sources.backends`), decided once the texts are in."""
    if backend == "all":
        files = [f for fs in BACKEND_FILES.values() for f in fs]
        return (*files, *RUNNER_GLOBS, *LIMIT_FILES)
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", backend):
        known = ", ".join([*BACKEND_FILES, "all"])
        raise UsageError(f"unknown backend '{backend}' (e.g. {known})")
    return (f"{ATTN}/*.py", MODEL_RUNNER, *RUNNER_GLOBS, *LIMIT_FILES)


def backend_patterns(texts: Mapping[str, str], backend: str) -> tuple[list[str], list[str]]:
    """(the primary files/globs for a backend in these texts, notes saying why)."""
    if backend == "all":
        return list(wanted_files("all")), []
    files, notes = backend_files(texts, backend)
    if not files:
        table = list(BACKEND_FILES.get(backend, ()))
        if not table:
            names = known_backends(texts) or list(BACKEND_FILES)
            raise UsageError(f"unknown backend '{backend}' (this install knows: "
                             f"{', '.join(names)}, all)")
        notes.append(f"taken from ddprobe's table instead: {', '.join(table)}")
        files = table
    return [*files, *RUNNER_GLOBS], notes


def phase_of(func: str | None) -> str:
    if func is None:
        return "module"
    name = func.split(".")[0].lower()
    if "capture" in name:
        return "capture"
    if "replay" in name:
        return "replay"
    if "forward" in name or "update" in name:
        return "per-batch"
    if name == "__init__" or any(w in name for w in ("init", "create", "alloc", "buffer",
                                                     "graph_state", "setup", "prepare")):
        return "init"
    return "per-batch"


def analyse_buffers(texts: Mapping[str, str], *, package: str = "", version: str | None = None,
                    backend: str = "all", params: SizingParams | None = None,
                    include_per_batch: bool = False) -> BufferReport:
    """Analyse the given module texts; rows for every buffer, plus 'not found' rows."""
    patterns, notes = backend_patterns(texts, backend)
    limit = seq_limit(texts)
    if params is not None:
        params = replace(params, seq_below=limit.below)
    primary = sorted(p for p in texts if any(fnmatch.fnmatch(p, g) for g in patterns))
    helpers = sorted(p for p in texts if p not in primary and p not in LIMIT_FILES)
    scans = _scan_modules(texts, primary, helpers)
    functions = _module_functions(scans)
    rows: list[BufferRow] = [_missing_file(pat, texts) for pat in patterns
                             if "*" not in pat and pat not in texts]
    for p in primary:
        s = scans[p]
        if s.error:
            rows.append(BufferRow(status="parse-error", attr="", file=p, message=s.error))
            continue
        rows.extend(_rows_for(s, scans, params, include_per_batch, functions))
        rows.extend(_missing_buffers(p, s, rows))
    return BufferReport(package=package, version=version, backend=backend,
                        files=(*primary, *helpers), rows=tuple(rows), params=params,
                        texts=dict(texts), notes=tuple(notes), seq_limit=limit)


def _scan_modules(texts: Mapping[str, str], primary: Sequence[str], helpers: Sequence[str]
                  ) -> dict[str, ModuleScan]:
    """Scans of the primary modules, and of the helper modules only what the backends/runners
    call to build an attribute; every scan shares every call site (its Resolver sees them all)
    and the other scans (the caller's module, to resolve what it passes)."""
    scans = {p: scan_module(p, texts[p]) for p in primary}
    producers = frozenset(n for p in primary for n in _PRODUCER.findall(texts[p]))
    scans.update({p: scan_module(p, texts[p], only=producers) for p in helpers})
    calls: dict[str, list[Any]] = {}
    for s in scans.values():
        for k, v in s.calls.items():
            calls.setdefault(k, []).extend(v)
    for s in scans.values():
        s.cache["calls"] = calls
        s.cache["scans"] = scans
    return scans


def _module_functions(scans: Mapping[str, ModuleScan]) -> dict[str, Any]:
    """Every module-level function (walked or not): each can be inlined into a size."""
    return {n.name: n for s in scans.values() if s.tree is not None for n in s.tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _missing_file(path: str, texts: Mapping[str, str]) -> BufferRow:
    base = path.rsplit("/", 1)[-1]
    cands = difflib.get_close_matches(base, [p.rsplit("/", 1)[-1] for p in texts], n=3,
                                      cutoff=0.5)
    near = [p for p in texts if p.rsplit("/", 1)[-1] in cands]
    hint = f"; nearest: {', '.join(sorted(near))}" if near else ""
    return BufferRow(status="missing-file", attr="", file=path,
                     message=f"{path}: not found in this version{hint}")


def _missing_buffers(path: str, scan: ModuleScan, rows: Sequence[BufferRow]) -> list[BufferRow]:
    out: list[BufferRow] = []
    present = {r.attr for r in rows if r.status == "found" and (
        r.file == path or (r.via is not None and path in r.via))}
    for want in EXPECTED.get(path, ()):
        if any(a == want or a.startswith(want + "[") for a in present):
            continue
        words = set(re.split(r"_+", want)) - {"cuda", "graph", ""}
        near = sorted({a for a in present if set(re.split(r"[_.\[\]\"']+", a)) & words}
                      | set(difflib.get_close_matches(want, sorted(present), n=2, cutoff=0.6)))
        hint = f"; nearest here: {', '.join(near[:4])}" if near else ""
        nones = [n for n in scan.none_sites if n.attr == want and not n.is_local]
        if nones:
            hint += "; only set to None at " + ", ".join(f"line {n.line}" for n in nones)
        out.append(BufferRow(status="missing-buffer", attr=want, file=path,
                             message=f"{want}: not found in this version of {path}{hint}"))
    return out


def _rows_for(scan: ModuleScan, scans: Mapping[str, ModuleScan], params: SizingParams | None,
              include_per_batch: bool, functions: Mapping[str, Any]) -> list[BufferRow]:
    resolver = Resolver(scan, functions, _calls(scan))
    rows: list[BufferRow] = []
    for a in scan.allocs:
        # a module-level function's allocation is a temporary unless it is returned (then it
        # is reported where a class stores it, see _helper_rows)
        phase = phase_of(a.func) if a.cls is not None else "per-batch"
        if a.target.startswith("return") or (phase == "per-batch" and not include_per_batch):
            continue
        rows.append(_row(scan, resolver, a, phase, params))
    rows.extend(_helper_rows(scan, scans, params, functions))
    return rows


def _row(scan: ModuleScan, resolver: Resolver, a: Alloc, phase: str,
         params: SizingParams | None, *, via: str | None = None,
         target: str | None = None, home: ModuleScan | None = None) -> BufferRow:
    # `home` is the module holding the attribute (differs from `scan` for helper allocations)
    home = home or scan
    tgt = target or a.target
    attr = tgt[5:] if tgt.startswith("self.") else tgt
    cls = a.cls if home is scan else _class_of(home, attr)
    shape_node = _shape_node(a)
    res = resolver.resolve(shape_node, a.cls, a.func, a.line) if shape_node is not None else None
    nones = [n for n in home.none_sites if n.attr == attr and n.cls == cls
             and n.same_storage(tgt, a.func)]
    uses, demands = _uses_and_demands(home, a, tgt, attr, cls)
    growing = [u for u in uses if u.grows]
    resolved, depends, free, notes = _resolution(res)
    demand_txt, demand_expr = _demand(home, demands, cls)
    sizes = _sizes(a, res, demand_expr, params)
    flags = _row_flags(fixed=bool(growing) and DRAFT not in depends, none=bool(nones),
                       short=any(s.short_by for s in sizes))
    return BufferRow(
        status="found", attr=attr, file=a.file, target=tgt, line=a.line,
        scope=".".join(p for p in (a.cls, a.func) if p) or "<module>", phase=phase,
        allocator=a.allocator, shape=a.shape, dtype=a.dtype, conditions=a.conditions,
        resolved=resolved, depends_on=depends, free=free, notes=notes,
        none_sites=tuple(f"{n.file}:{n.line} {n.scope}" for n in nones),
        growing_uses=tuple(f"{u.file}:{u.line} {u.func}: {u.text}" for u in growing),
        uses=tuple(f"{u.file}:{u.line} {u.func}: {u.text}" for u in uses),
        demand=demand_txt, flags=flags, sizes=sizes, shape_span=a.shape_span, via=via)


def _row_flags(*, fixed: bool, none: bool, short: bool) -> tuple[str, ...]:
    return tuple(flag for flag, on in ((FLAG_FIXED, fixed), (FLAG_NONE, none),
                                       (FLAG_SHORT, short)) if on)


def _resolution(res: Resolved | None
                ) -> tuple[str | None, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(text, depends_on, free names, notes) of a resolved size; nothing when unresolved."""
    if res is None:
        return None, (), (), ()
    return res.text, res.depends_on, res.free, res.notes


def _uses_and_demands(home: ModuleScan, a: Alloc, tgt: str, attr: str, cls: str | None
                      ) -> tuple[list[Use], list[Demand]]:
    """The accesses of the buffer in its class, and the layouts they demand."""
    if not cls:
        return [], []
    # uses are looked up on the attribute itself (`self.x` of `self.x.buffer`); a local that
    # the function stores in a new instance (`cls(x=x)`) is that instance's field
    held_in = None if tgt.startswith("self.") else constructor_field(home, a)
    if held_in is not None:
        use_tgt = "self." + held_in
    elif tgt.startswith("self."):
        use_tgt = "self." + re.split(r"[.\[]", attr)[0]
    else:
        use_tgt = tgt
    fake = Alloc(use_tgt, home.file, a.line, a.end_line, cls, a.func, a.allocator, a.shape,
                 a.shape_span, a.shape_kind, a.dtype, a.conditions)
    uses = find_uses(_use_index(home), fake)
    return uses, (find_demands(home, fake, uses) if uses else [])


def _demand(home: ModuleScan, demands: Sequence[Demand], cls: str | None
            ) -> tuple[str | None, ast.expr | None]:
    """(the first demand as text, its per-request size resolved) or (None, None)."""
    if not demands:
        return None, None
    d = demands[0]
    dres = Resolver(home, None, _calls(home)).resolve(d.per_request, cls, d.func, d.line)
    return (f"{d.name} = {d.text}  [{d.file}:{d.line} {d.func}]; per request at the longest "
            f"seq_len a request reaches ({SEQ}): {dres.text}; x max_bs requests"), dres.expr


def _calls(scan: ModuleScan) -> Any:
    return scan.cache.get("calls")


def _use_index(scan: ModuleScan) -> UseIndex:
    idx = scan.cache.get("uses")
    if not isinstance(idx, UseIndex):
        idx = scan.cache["uses"] = UseIndex(scan)
    return idx


def _class_of(scan: ModuleScan, attr: str) -> str | None:
    attr = re.split(r"[.\[]", attr)[0]  # `_verify_mask.buffer` is held in `_verify_mask`
    for cls, attrs in scan.class_attrs.items():
        if attr in attrs:
            return cls
    return None


def _shape_node(a: Alloc) -> ast.expr | None:
    if a.shape_kind not in ("dims", "arange") or a.shape == "?":
        return None
    if a.shape_node is not None:
        return a.shape_node
    try:
        return ast.parse(a.shape, mode="eval").body
    except SyntaxError:
        return None


def _sizes(a: Alloc, res: Any, demand: ast.expr | None,
           params: SizingParams | None) -> tuple[SizeAt, ...]:
    if params is None or not params.budgets:
        return ()
    per_el, _ = dtype_bytes(a.dtype, a.allocator)
    out: list[SizeAt] = []
    for b in params.budgets:
        env = params.env(b)
        if res is None:
            out.append(SizeAt(b, b + 1, None, None, missing=(f"shape: {a.shape_kind}",)))
            continue
        n, missing = count_elements(res.expr, a.shape_kind, env)
        dn = _demand_at(demand, env)
        short = dn - n if (dn is not None and n is not None and dn > n) else None
        at_ctx = None
        if short is None and n is not None and SEQ in env and CONTEXT in env:
            dc = _demand_at(demand, {**env, SEQ: env[CONTEXT]})
            at_ctx = dc - n if dc is not None and dc > n else None
        out.append(SizeAt(b, b + 1, n, None if n is None or per_el is None else n * per_el,
                          dn, short, missing, env.get(SEQ) if dn is not None else None,
                          at_ctx))
    return tuple(out)


def _demand_at(demand: ast.expr | None, env: Mapping[str, int]) -> int | None:
    """The use's layout for max_bs requests at env's seq_len, or None."""
    if demand is None or MAX_BS not in env:
        return None
    v, _ = evaluate(demand, dict(env))
    return None if v is None else v * env[MAX_BS]


def _helper_rows(scan: ModuleScan, scans: Mapping[str, ModuleScan],
                 params: SizingParams | None, functions: Mapping[str, Any]) -> list[BufferRow]:
    """`self.x = helper(...)` where helper (in another read module) returns an allocation, and
    `self.x = OtherClass.create(...)` where that class (in another read module) allocates."""
    helper = _Helpers(scan, scans, params, functions)
    rows: list[BufferRow] = []
    for cls, attrs in scan.class_attrs.items():
        for attr, assigns in attrs.items():
            for asg in assigns:
                if isinstance(asg.value, ast.Call):
                    rows.extend(helper.class_rows(asg, asg.value))
                    rows.extend(helper.returned_rows(cls, attr, asg, asg.value))
    return rows


class _Helpers:
    """What the other read modules build for `scan`: the allocations their module-level
    functions return, and their classes (each reported once)."""

    def __init__(self, scan: ModuleScan, scans: Mapping[str, ModuleScan],
                 params: SizingParams | None, functions: Mapping[str, Any]) -> None:
        self.scan, self.params, self.functions = scan, params, functions
        others = [o for o in scans.values() if o is not scan]
        self.returns: dict[str, tuple[ModuleScan, Alloc]] = {}
        for other in others:
            for a in other.allocs:
                if a.target.startswith("return") and a.cls is None and a.func:
                    self.returns.setdefault(a.func, (other, a))
        self.classes: dict[str, ModuleScan] = {}
        for other in others:
            for c in other.class_attrs:
                self.classes.setdefault(c, other)
        self.seen_classes: set[str] = set()

    def class_rows(self, asg: Assignment, v: ast.Call) -> list[BufferRow]:
        """`self.buffers = DecodeInputBuffers.create(...)`: that class's init buffers."""
        owner = v.func.value.id if isinstance(v.func, ast.Attribute) and isinstance(
            v.func.value, ast.Name) else (v.func.id if isinstance(v.func, ast.Name) else None)
        if owner not in self.classes or owner in self.seen_classes:
            return []
        self.seen_classes.add(owner)
        home = self.classes[owner]
        res = Resolver(home, self.functions, _calls(home))
        via = f"{ast.unparse(v.func)}() at {self.scan.file}:{asg.line}"
        return [replace(_row(home, res, a, "init", self.params), via=via) for a in home.allocs
                if a.cls == owner and phase_of(a.func) == "init"]

    def returned_rows(self, cls: str, attr: str, asg: Assignment, v: ast.Call
                      ) -> list[BufferRow]:
        """`self.x = helper(...)` where helper returns an allocation: reported as self.x."""
        callee = v.func.id if isinstance(v.func, ast.Name) else (
            v.func.attr if isinstance(v.func, ast.Attribute) else None)
        if callee is None or callee not in self.returns:
            return []
        other, a = self.returns[callee]
        sub = a.target[len("return"):]
        dtype = a.dtype
        for k in v.keywords:  # `dtype=dtype` in the helper: the caller's keyword
            if k.arg and k.arg == a.dtype:
                dtype = ast.unparse(k.value)
        moved = replace(a, dtype=dtype)
        row = _row(other, Resolver(other, self.functions, _calls(other)), moved,
                   phase_of(asg.func), self.params,
                   via=f"{callee}() at {self.scan.file}:{asg.line}",
                   target=f"self.{attr}{sub}", home=self.scan)
        nones = tuple(f"{n.file}:{n.line} {n.scope}" for n in self.scan.none_sites
                      if n.attr == attr and n.cls == cls and not n.is_local)
        flags = row.flags if not nones or FLAG_NONE in row.flags else (*row.flags, FLAG_NONE)
        return [replace(row, attr=f"{attr}{sub}", none_sites=nones, flags=flags)]
