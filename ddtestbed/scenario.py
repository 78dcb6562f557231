"""Scenario files: which fake GPU the testbed reports, its timings, and which defects are on.

A scenario is YAML (schema in docs/testbed.md). Bundled ones live in `scenarios/`; the
`--testbed-scenario` flag takes a bundled name or a path. Every key is checked: an unknown key
or a wrong type is one `ScenarioError` naming file, line and key.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
HANG_STAGES = ("load", "warmup")
STARTUP_FAILURES = ("import", "nccl")


class ScenarioError(ValueError):
    """A scenario file is missing or invalid. The message names file, line and key."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 key: str | None = None) -> None:
        self.path, self.line, self.key = path, line, key
        where = f"{path}:{line}: " if path and line else (f"{path}: " if path else "")
        super().__init__(where + message)


@dataclass(frozen=True)
class GpuSpec:
    name: str = "NVIDIA H200"
    arch: str = "sm_90"
    memory_gib: float = 139.8
    count: int = 8
    driver: str = "580.95.05"  # what its nvidia-smi stand-in reports (ddtestbed.nvidia_smi)
    cuda: str = "13.0"


@dataclass(frozen=True)
class ModelSpec:
    name: str = "ddtestbed/sim-coder"
    context_len: int = 32768
    vocab_size: int = 163840
    hidden_size: int = 7168
    num_layers: int = 61
    num_heads: int = 64
    weights_gib: float = 60.0
    kv_bytes_per_token: int = 70272


@dataclass(frozen=True)
class DraftSpec:
    accuracy: float = 0.88  # P(draft's top-1 == target) one token ahead
    decay: float = 0.99  # accuracy multiplier per extra depth
    topk: int = 4  # default --speculative-eagle-topk
    num_steps: int = 16  # default --speculative-num-steps (max tree depth)
    budget: int = 8  # default tree budget when no flag sets one


@dataclass(frozen=True)
class ServerDefaults:
    cuda_graph_max_bs: int = 64
    max_running_requests: int = 64
    mem_fraction_static: float = 0.85
    # the SGLang version the server reports (/server_info "version") and logs like: before
    # 0.5.5 the decode lines read `Decode batch. #running-req`, from 0.5.5 `Decode batch, ...`
    # ("" = the testbed's own version)
    reported_version: str = ""


@dataclass(frozen=True)
class Timing:
    scale: float = 1.0  # multiplies every duration (overridden by --testbed-time-scale)
    load_s: float = 330.0
    dummy_load_fraction: float = 0.05  # --load-format dummy: random init, no weights read
    capture_per_bs_s: float = 1.5
    prefill_base_ms: float = 20.0
    prefill_per_token_ms: float = 0.05
    step_base_ms: float = 15.0
    step_per_token_ms: float = 0.03  # per verify token in the batch (bs * draft tokens)
    eager_overhead_ms: float = 31.7  # launch overhead per step that a CUDA graph removes


@dataclass(frozen=True)
class BufferSizingDefect:
    """(a) graph mask sized from the drafter's default draft-token count."""

    default_num_draft_tokens: int | None = None


@dataclass(frozen=True)
class GraphCaptureDefect:
    """(b) trees wider than this re-initialise the attention buffers after capture."""

    max_wave_tokens: int | None = None


@dataclass(frozen=True)
class WorkspaceDefect:
    """(c) cuBLAS workspace bytes the verify GEMM needs per token during capture."""

    bytes_per_token: int = 0


@dataclass(frozen=True)
class KernelDefect:
    """(d) the triton tree-attention kernel mis-indexes rows past `tile_rows` on `arch`."""

    arch: str | None = None
    tile_rows: int | None = None
    max_rows: int | None = None  # only trees of at most this many rows (a window of budgets)


@dataclass(frozen=True)
class EagerOnlyDefect:
    """(f) the eager path's ragged mask indexer overflows from this many draft tokens."""

    min_draft_tokens: int | None = None


@dataclass(frozen=True)
class StaleScalarDefect:
    """(g) a scalar of the verify pass (its logit scale) captured into the graph from the
    capture's dummy batch: replay keeps the stale value, which flips near-tie tokens (a
    one-space vs two-space choice inside a code line) at one position in `every`, for trees of
    at least `min_draft_tokens`. Eager passes the live value: only graph output changes.
    `min_batch`: only the graphs captured for batch sizes of at least this hold the stale
    value (a capture whose dummy batch differs by size), so a probe whose batches stay
    smaller replays only clean graphs."""

    min_draft_tokens: int | None = None
    every: int = 3
    min_batch: int | None = None


@dataclass(frozen=True)
class NondeterministicDefect:
    """(h) a reduction order that varies run to run (split-K, atomics), in eager and graph
    alike: near-tie tokens flip at one position in `every`, chosen afresh by each server
    process, so two runs of one config can differ. 0: deterministic."""

    every: int = 0


@dataclass(frozen=True)
class Defects:
    buffer_sizing: BufferSizingDefect = field(default_factory=BufferSizingDefect)
    graph_capture: GraphCaptureDefect = field(default_factory=GraphCaptureDefect)
    cublas_workspace: WorkspaceDefect = field(default_factory=WorkspaceDefect)
    kernel: KernelDefect = field(default_factory=KernelDefect)
    stale_scalar: StaleScalarDefect = field(default_factory=StaleScalarDefect)
    eager_only: EagerOnlyDefect = field(default_factory=EagerOnlyDefect)
    nondeterministic: NondeterministicDefect = field(default_factory=NondeterministicDefect)
    hang: str | None = None  # "load": never listens; "warmup": listens, never healthy
    hang_budget: int | None = None  # "warmup" hang only at this budget (draft tokens - 1)
    startup: str | None = None  # "import" | "nccl": dies before the weights are loaded
    # seconds the HTTP front stays up after the scheduler died (SGLang's parent outliving its
    # scheduler): requests hang, /health_generate fails, then the process is killed
    front_linger_s: float = 0.0


@dataclass(frozen=True)
class Scenario:
    name: str = "default"
    description: str = ""
    gpu: GpuSpec = field(default_factory=GpuSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    draft: DraftSpec = field(default_factory=DraftSpec)
    server: ServerDefaults = field(default_factory=ServerDefaults)
    timing: Timing = field(default_factory=Timing)
    defects: Defects = field(default_factory=Defects)
    source: str = ""  # the file it came from


def bundled_scenarios() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def resolve_scenario_path(name_or_path: str) -> Path:
    """A bundled scenario name (e.g. `seed`) or a path to a YAML file."""
    p = Path(name_or_path).expanduser()
    if p.suffix in (".yaml", ".yml") or p.exists() or "/" in name_or_path:
        if not p.is_file():
            raise ScenarioError("scenario file not found", path=str(p))
        return p
    bundled = SCENARIO_DIR / f"{name_or_path}.yaml"
    if not bundled.is_file():
        raise ScenarioError(f"unknown scenario '{name_or_path}' (bundled: "
                            f"{', '.join(bundled_scenarios())}; or give a path to a .yaml file)")
    return bundled


def load_scenario(name_or_path: str) -> Scenario:
    path = resolve_scenario_path(name_or_path)
    text = path.read_text(encoding="utf-8")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ScenarioError(f"invalid YAML: {getattr(e, 'problem', e)}", path=str(path),
                            line=mark.line + 1 if mark else None) from None
    if node is None:
        return Scenario(name=path.stem, source=str(path))
    scenario = _build(Scenario, node, str(path), "")
    if scenario.name == "default":
        scenario = replace(scenario, name=path.stem)
    return _check(scenario, str(path))


def _build(cls: type, node: yaml.Node, path: str, prefix: str) -> Any:
    if not isinstance(node, yaml.MappingNode):
        raise ScenarioError(f"expected a mapping for '{prefix or 'scenario'}'", path=path,
                            line=node.start_mark.line + 1, key=prefix or None)
    known = {f.name: f for f in fields(cls) if f.name != "source"}
    kwargs: dict[str, Any] = {"source": path} if cls is Scenario else {}
    for key_node, value_node in node.value:
        key = key_node.value
        dotted = f"{prefix}.{key}" if prefix else key
        line = key_node.start_mark.line + 1
        if key not in known:
            raise ScenarioError(f"unknown key '{dotted}' (expected one of: "
                                f"{', '.join(sorted(known))})", path=path, line=line, key=dotted)
        sub = _SUBSECTIONS.get((cls.__name__, key))
        if sub is not None:
            kwargs[key] = _build(sub, value_node, path, dotted)
        else:
            kwargs[key] = _scalar(cls, key, value_node, path, dotted)
    return cls(**kwargs)


def _scalar(cls: type, key: str, node: yaml.Node, path: str, dotted: str) -> Any:
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.ScalarNode):
        raise ScenarioError(f"'{dotted}' must be a single value", path=path, line=line, key=dotted)
    value = yaml.safe_load(yaml.serialize(node))
    default = next(f for f in fields(cls) if f.name == key).default
    want: tuple[type, ...]
    if isinstance(default, bool):
        want = (bool,)
    elif isinstance(default, float):
        want = (int, float)
    elif isinstance(default, int):
        want = (int,)
    elif isinstance(default, str):
        want = (str,)
    else:  # Optional fields default to None
        want = _OPTIONAL_TYPES.get((cls.__name__, key), (str,))
    if value is None and default is None:
        return None
    if isinstance(value, bool) and bool not in want or not isinstance(value, want):
        names = "/".join(t.__name__ for t in want)
        raise ScenarioError(f"'{dotted}' must be {names}, got {value!r}", path=path, line=line,
                            key=dotted)
    return float(value) if float in want and not isinstance(value, bool) else value


_SUBSECTIONS: dict[tuple[str, str], type] = {
    ("Scenario", "gpu"): GpuSpec,
    ("Scenario", "model"): ModelSpec,
    ("Scenario", "draft"): DraftSpec,
    ("Scenario", "server"): ServerDefaults,
    ("Scenario", "timing"): Timing,
    ("Scenario", "defects"): Defects,
    ("Defects", "buffer_sizing"): BufferSizingDefect,
    ("Defects", "graph_capture"): GraphCaptureDefect,
    ("Defects", "cublas_workspace"): WorkspaceDefect,
    ("Defects", "kernel"): KernelDefect,
    ("Defects", "stale_scalar"): StaleScalarDefect,
    ("Defects", "eager_only"): EagerOnlyDefect,
    ("Defects", "nondeterministic"): NondeterministicDefect,
}
_OPTIONAL_TYPES: dict[tuple[str, str], tuple[type, ...]] = {
    ("BufferSizingDefect", "default_num_draft_tokens"): (int,),
    ("GraphCaptureDefect", "max_wave_tokens"): (int,),
    ("KernelDefect", "arch"): (str,),
    ("KernelDefect", "tile_rows"): (int,),
    ("StaleScalarDefect", "min_draft_tokens"): (int,),
    ("StaleScalarDefect", "min_batch"): (int,),
    ("KernelDefect", "max_rows"): (int,),
    ("EagerOnlyDefect", "min_draft_tokens"): (int,),
    ("Defects", "hang"): (str,),
    ("Defects", "hang_budget"): (int,),
    ("Defects", "startup"): (str,),
}


def _check(s: Scenario, path: str) -> Scenario:
    def bad(msg: str, key: str) -> ScenarioError:
        return ScenarioError(msg, path=path, key=key)

    if s.defects.startup is not None and s.defects.startup not in STARTUP_FAILURES:
        raise bad(f"'defects.startup' must be one of {', '.join(STARTUP_FAILURES)} or null",
                  "defects.startup")
    if s.defects.hang is not None and s.defects.hang not in HANG_STAGES:
        raise bad(f"'defects.hang' must be one of {', '.join(HANG_STAGES)} or null", "defects.hang")
    if not 0.0 <= s.draft.accuracy <= 1.0:
        raise bad("'draft.accuracy' must be between 0 and 1", "draft.accuracy")
    if not 0.0 < s.draft.decay <= 1.0:
        raise bad("'draft.decay' must be in (0, 1]", "draft.decay")
    if s.timing.scale < 0:
        raise bad("'timing.scale' must be >= 0", "timing.scale")
    if not 0.0 <= s.timing.dummy_load_fraction <= 1.0:
        raise bad("'timing.dummy_load_fraction' must be between 0 and 1",
                  "timing.dummy_load_fraction")
    for name in ("context_len", "vocab_size", "hidden_size", "num_layers", "num_heads"):
        if getattr(s.model, name) <= 0:
            raise bad(f"'model.{name}' must be > 0", f"model.{name}")
    if s.defects.nondeterministic.every < 0:
        raise bad("'defects.nondeterministic.every' must be >= 0",
                  "defects.nondeterministic.every")
    if s.defects.stale_scalar.every < 1:
        raise bad("'defects.stale_scalar.every' must be >= 1", "defects.stale_scalar.every")
    k = s.defects.kernel
    if (k.arch is None) != (k.tile_rows is None):
        raise bad("'defects.kernel' needs both 'arch' and 'tile_rows'", "defects.kernel")
    return s
