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
from ddprobe.sources.bufscan import Alloc, ModuleScan, scan_module
from ddprobe.sources.bufsize import CONTEXT, DRAFT, MAX_BS, STEPS, TOPK, Resolver
from ddprobe.sources.bufuse import Demand, Use, UseIndex, find_demands, find_uses

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
FLAG_SHORT = "short-at-full-context"  # the use's own layout needs more than is allocated


@dataclass(frozen=True)
class SizingParams:
    max_bs: int | None = None
    budgets: tuple[int, ...] = ()
    context_len: int | None = None
    topk: int | None = None
    num_steps: int | None = None
    extra: tuple[tuple[str, int], ...] = ()

    def env(self, budget: int) -> dict[str, int]:
        env: dict[str, int] = {DRAFT: budget + 1}
        for k, v in ((MAX_BS, self.max_bs), (CONTEXT, self.context_len), (TOPK, self.topk),
                     (STEPS, self.num_steps)):
            if v is not None:
                env[k] = v
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

    def find(self, attr: str) -> list[BufferRow]:
        return [r for r in self.rows if r.status == "found" and _matches(r, attr)]

    def to_dict(self) -> dict[str, Any]:
        return {"package": self.package, "version": self.version, "backend": self.backend,
                "files": list(self.files),
                "params": asdict(self.params) if self.params else None,
                "notes": list(self.notes), "rows": [r.to_dict() for r in self.rows]}


def _matches(row: BufferRow, name: str) -> bool:
    return name in (row.attr, row.target, f"{row.scope.split('.')[0]}.{row.attr}")


def wanted_files(backend: str) -> tuple[str, ...]:
    """Package-relative paths/globs to read for a backend (`all` = every known backend).

    A named backend reads every attention module and the backend registry: which of them it
    uses follows the class hierarchy (`sources.backends`), decided once the texts are in."""
    if backend == "all":
        files = [f for fs in BACKEND_FILES.values() for f in fs]
        return (*files, *RUNNER_GLOBS)
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", backend):
        known = ", ".join([*BACKEND_FILES, "all"])
        raise UsageError(f"unknown backend '{backend}' (e.g. {known})")
    return (f"{ATTN}/*.py", MODEL_RUNNER, *RUNNER_GLOBS)


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
    primary = sorted(p for p in texts if any(fnmatch.fnmatch(p, g) for g in patterns))
    helpers = sorted(p for p in texts if p not in primary)
    scans = {p: scan_module(p, texts[p]) for p in primary}
    # helper modules: only what the backends/runners call to build an attribute
    producers = frozenset(n for p in primary for n in _PRODUCER.findall(texts[p]))
    scans.update({p: scan_module(p, texts[p], only=producers) for p in helpers})
    # every module-level function can be inlined into a size (walked or not)
    functions = {n.name: n for s in scans.values() if s.tree is not None for n in s.tree.body
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    calls: dict[str, list[Any]] = {}
    for s in scans.values():
        for k, v in s.calls.items():
            calls.setdefault(k, []).extend(v)
    for s in scans.values():
        s.cache["calls"] = calls  # every module's Resolver sees every call site
        s.cache["scans"] = scans  # and the caller's module, to resolve what it passes
    rows: list[BufferRow] = []
    for pat in patterns:
        if "*" not in pat and pat not in texts:
            rows.append(_missing_file(pat, texts))
    for p in primary:
        s = scans[p]
        if s.error:
            rows.append(BufferRow(status="parse-error", attr="", file=p, message=s.error))
            continue
        rows.extend(_rows_for(s, scans, params, include_per_batch, functions))
        rows.extend(_missing_buffers(p, s, rows))
    return BufferReport(package=package, version=version, backend=backend,
                        files=(*primary, *helpers), rows=tuple(rows), params=params,
                        texts=dict(texts), notes=tuple(notes))


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
    # uses are looked up on the attribute itself (`self.x` of `self.x.buffer`)
    use_tgt = "self." + re.split(r"[.\[]", attr)[0] if tgt.startswith("self.") else tgt
    fake = Alloc(use_tgt, home.file, a.line, a.end_line, cls, a.func, a.allocator, a.shape,
                 a.shape_span, a.shape_kind, a.dtype, a.conditions)
    uses: list[Use] = find_uses(_use_index(home), fake) if cls else []
    demands: list[Demand] = find_demands(home, fake, uses) if uses else []
    growing = [u for u in uses if u.grows]
    flags: list[str] = []
    depends = res.depends_on if res else ()
    if growing and DRAFT not in depends:
        flags.append(FLAG_FIXED)
    if nones:
        flags.append(FLAG_NONE)
    demand_txt, demand_expr = None, None
    if demands:
        d = demands[0]
        dres = Resolver(home, None, _calls(home)).resolve(d.per_request, cls, d.func, d.line)
        demand_expr = dres.expr
        demand_txt = (f"{d.name} = {d.text}  [{d.file}:{d.line} {d.func}]; per request at "
                      f"seq_len = context_len: {dres.text}; x max_bs requests")
    sizes = _sizes(a, res, demand_expr, params)
    if any(s.short_by for s in sizes):
        flags.append(FLAG_SHORT)
    return BufferRow(
        status="found", attr=attr, file=a.file, target=tgt, line=a.line,
        scope=".".join(p for p in (a.cls, a.func) if p) or "<module>", phase=phase,
        allocator=a.allocator, shape=a.shape, dtype=a.dtype, conditions=a.conditions,
        resolved=res.text if res else None, depends_on=depends,
        free=res.free if res else (), notes=res.notes if res else (),
        none_sites=tuple(f"{n.file}:{n.line} {n.scope}" for n in nones),
        growing_uses=tuple(f"{u.file}:{u.line} {u.func}: {u.text}" for u in growing),
        demand=demand_txt, flags=tuple(flags), sizes=sizes,
        shape_span=a.shape_span, via=via)


def _calls(scan: ModuleScan) -> Any:
    return scan.cache.get("calls")


def _use_index(scan: ModuleScan) -> UseIndex:
    idx = scan.cache.get("uses")
    if not isinstance(idx, UseIndex):
        idx = scan.cache["uses"] = UseIndex(scan)
    return idx


def _class_of(scan: ModuleScan, attr: str) -> str | None:
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
        dn = None
        if demand is not None and MAX_BS in env:
            v, _ = evaluate(demand, env)
            dn = None if v is None else v * env[MAX_BS]
        short = dn - n if (dn is not None and n is not None and dn > n) else None
        out.append(SizeAt(b, b + 1, n, None if n is None or per_el is None else n * per_el,
                          dn, short, missing))
    return tuple(out)


def _helper_rows(scan: ModuleScan, scans: Mapping[str, ModuleScan],
                 params: SizingParams | None, functions: Mapping[str, Any]) -> list[BufferRow]:
    """`self.x = helper(...)` where helper (in another read module) returns an allocation."""
    returns: dict[str, tuple[ModuleScan, Alloc]] = {}
    for other in scans.values():
        if other is scan:
            continue
        for a in other.allocs:
            if a.target.startswith("return") and a.cls is None and a.func:
                returns.setdefault(a.func, (other, a))
    classes: dict[str, ModuleScan] = {}
    for other in scans.values():
        if other is not scan:
            for c in other.class_attrs:
                classes.setdefault(c, other)
    rows: list[BufferRow] = []
    seen_classes: set[str] = set()
    for cls, attrs in scan.class_attrs.items():
        for attr, assigns in attrs.items():
            for asg in assigns:
                v = asg.value
                if not isinstance(v, ast.Call):
                    continue
                owner = v.func.value.id if isinstance(v.func, ast.Attribute) and isinstance(
                    v.func.value, ast.Name) else (v.func.id if isinstance(v.func, ast.Name)
                                                  else None)
                if owner in classes and owner not in seen_classes:
                    # `self.buffers = DecodeInputBuffers.create(...)`: that class's buffers
                    seen_classes.add(owner)
                    home = classes[owner]
                    res = Resolver(home, functions, _calls(home))
                    for a in home.allocs:
                        if a.cls == owner and phase_of(a.func) == "init":
                            r = _row(home, res, a, "init", params)
                            rows.append(replace(r, via=f"{ast.unparse(v.func)}() at "
                                                       f"{scan.file}:{asg.line}"))
                callee = v.func.id if isinstance(v.func, ast.Name) else (
                    v.func.attr if isinstance(v.func, ast.Attribute) else None)
                if callee not in returns:
                    continue
                other, a = returns[callee]
                sub = a.target[len("return"):]
                dtype = a.dtype
                for k in v.keywords:  # `dtype=dtype` in the helper: the caller's keyword
                    if k.arg and k.arg == a.dtype:
                        dtype = ast.unparse(k.value)
                moved = Alloc(a.target, a.file, a.line, a.end_line, a.cls, a.func, a.allocator,
                              a.shape, a.shape_span, a.shape_kind, dtype, a.conditions,
                              a.shape_node)
                row = _row(other, Resolver(other, functions, _calls(other)), moved,
                           phase_of(asg.func), params,
                           via=f"{callee}() at {scan.file}:{asg.line}",
                           target=f"self.{attr}{sub}", home=scan)
                nones = tuple(f"{n.file}:{n.line} {n.scope}" for n in scan.none_sites
                              if n.attr == attr and n.cls == cls and not n.is_local)
                flags = row.flags if not nones or FLAG_NONE in row.flags else (
                    *row.flags, FLAG_NONE)
                rows.append(replace(row, attr=f"{attr}{sub}", none_sites=nones, flags=flags))
    return rows
