"""The server arguments, laid out like SGLang's `srt/server_args.py`.

Flag definitions are plain `parser.add_argument("--flag", type=..., default=ServerArgs.x,
help=...)` calls so tools that read SGLang's flags from source (ddprobe's `flags`) read these
the same way. Defaults left as None are filled from the scenario (the fake GPU's defaults) in
`resolve_server_args`.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from typing import TYPE_CHECKING, List, Optional

if TYPE_CHECKING:
    from ..scenario import Scenario

ATTENTION_BACKEND_CHOICES = ["triton", "flashinfer", "fa3", "torch_native"]
# SGLang 0.5.4-0.5.11's list, where 0.5.11 keeps it (srt/server_args.py)
DETERMINISTIC_ATTENTION_BACKEND_CHOICES = ["flashinfer", "fa3", "triton"]
LOG_LEVELS = ["debug", "info", "warning", "error", "critical"]
DEFAULT_SCENARIO = "seed"
TIME_SCALE_ENV = "DDTESTBED_TIME_SCALE"
# SGLang 0.5.11's LOAD_FORMAT_CHOICES
LOAD_FORMAT_CHOICES = ["auto", "pt", "safetensors", "npcache", "dummy", "sharded_state", "gguf",
                       "bitsandbytes", "mistral", "layered", "flash_rl", "remote",
                       "remote_instance", "fastsafetensors", "private", "runai_streamer"]
STARTUP_SCALE_ENV = "DDTESTBED_STARTUP_SCALE"
SCENARIO_ENV = "DDTESTBED_SCENARIO"
DEVICE_ENV = "DDTESTBED_DEVICE"
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE")

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ServerArgs:
    # Model and tokenizer
    model_path: str = ""
    tokenizer_path: Optional[str] = None
    served_model_name: Optional[str] = None
    context_length: Optional[int] = None

    # HTTP server
    host: str = "127.0.0.1"
    port: int = 30000

    # Memory and scheduling
    mem_fraction_static: Optional[float] = None
    max_running_requests: Optional[int] = None

    # Runtime options
    tp_size: int = 1
    random_seed: int = 0

    # Model weights ("dummy": random values, no weights read; as SGLang's --load-format)
    load_format: str = "auto"

    # Logging
    log_level: str = "info"
    decode_log_interval: int = 40
    enable_metrics: bool = False

    # Speculative decoding
    speculative_algorithm: Optional[str] = None
    speculative_draft_model_path: Optional[str] = None
    speculative_num_steps: Optional[int] = None
    speculative_eagle_topk: Optional[int] = None
    speculative_num_draft_tokens: Optional[int] = None
    speculative_ddtree_budget: Optional[int] = None
    speculative_draft_load_format: Optional[str] = None

    # Kernel backend
    attention_backend: Optional[str] = None

    # Optimization/debug options
    disable_cuda_graph: bool = False
    disable_cuda_graph_padding: bool = False
    cuda_graph_max_bs: Optional[int] = None
    cuda_graph_bs: Optional[List[int]] = None
    skip_server_warmup: bool = False
    enable_deterministic_inference: bool = False

    # Testbed
    testbed_scenario: Optional[str] = None
    testbed_device: Optional[str] = None  # cpu | cuda; None: $DDTESTBED_DEVICE, else auto
    testbed_time_scale: Optional[float] = None
    testbed_startup_scale: Optional[float] = None

    def __post_init__(self) -> None:
        # SGLang rewrites and asserts here, after parsing and before anything starts
        # (0.4.6.post5 .. 0.5.11 ServerArgs.__post_init__; 0.5.2x arg_groups/*_hook.py).
        self._handle_attention_backend()
        self._handle_speculative_decoding()
        self._handle_deterministic_inference()

    def _handle_deterministic_inference(self) -> None:
        # as SGLang 0.5.11: a backend without the mode is refused (the default one too, once
        # resolve_server_args has picked it)
        if not self.enable_deterministic_inference:
            return
        if self.attention_backend is not None and \
                self.attention_backend not in DETERMINISTIC_ATTENTION_BACKEND_CHOICES:
            raise ValueError(
                f"Currently only {DETERMINISTIC_ATTENTION_BACKEND_CHOICES} attention backends "
                "are supported for deterministic inference, but you explicitly specified "
                f"'{self.attention_backend}'.")

    def _handle_attention_backend(self) -> None:
        if self.attention_backend == "torch_native":
            logger.warning("Cuda graph is disabled because of using torch native attention "
                           "backend")
            self.disable_cuda_graph = True

    def _handle_speculative_decoding(self) -> None:
        if self.speculative_algorithm == "NEXTN":
            # NEXTN shares the same implementation of EAGLE
            self.speculative_algorithm = "EAGLE"
        if self.speculative_algorithm not in EAGLE_FAMILY:
            return
        if self.max_running_requests is None:
            self.max_running_requests = 48
        # Auto choose parameters
        if self.speculative_num_steps is None:
            assert (
                self.speculative_eagle_topk is None
                and self.speculative_num_draft_tokens is None
            )
            (
                self.speculative_num_steps,
                self.speculative_eagle_topk,
                self.speculative_num_draft_tokens,
            ) = auto_choose_speculative_params(self)
        if self.speculative_eagle_topk is None:
            self.speculative_eagle_topk = 1 if self.speculative_algorithm == "STANDALONE" else 4
        if (
            self.speculative_eagle_topk == 1
            and self.speculative_num_draft_tokens != self.speculative_num_steps + 1
        ):
            logger.warning(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                "speculative_eagle_topk == 1"
            )
            self.speculative_num_draft_tokens = self.speculative_num_steps + 1

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        # Model and tokenizer
        parser.add_argument(
            "--model-path",
            "--model",
            type=str,
            help="The path of the model weights. The testbed only uses it as the served name.",
            required=True,
        )
        parser.add_argument(
            "--tokenizer-path",
            type=str,
            default=ServerArgs.tokenizer_path,
            help="The path of the tokenizer.",
        )
        parser.add_argument(
            "--served-model-name",
            type=str,
            default=ServerArgs.served_model_name,
            help="Override the model name returned by the v1/models endpoint in OpenAI API server.",
        )
        parser.add_argument(
            "--context-length",
            type=int,
            default=ServerArgs.context_length,
            help="The model's maximum context length. Defaults to the scenario's model.",
        )

        # HTTP server
        parser.add_argument(
            "--host",
            type=str,
            default=ServerArgs.host,
            help="The host of the HTTP server.",
        )
        parser.add_argument(
            "--port",
            type=int,
            default=ServerArgs.port,
            help="The port of the HTTP server.",
        )

        # Memory and scheduling
        parser.add_argument(
            "--mem-fraction-static",
            type=float,
            default=ServerArgs.mem_fraction_static,
            help="The fraction of the memory used for static allocation (model weights and KV cache memory pool).",
        )
        parser.add_argument(
            "--max-running-requests",
            type=int,
            default=ServerArgs.max_running_requests,
            help="The maximum number of running requests.",
        )

        # Runtime options
        parser.add_argument(
            "--tensor-parallel-size",
            "--tp-size",
            type=int,
            default=ServerArgs.tp_size,
            help="The tensor parallelism size.",
        )
        parser.add_argument(
            "--random-seed",
            type=int,
            default=ServerArgs.random_seed,
            help="The random seed.",
        )

        # Logging
        parser.add_argument(
            "--log-level",
            type=str,
            choices=LOG_LEVELS,
            default=ServerArgs.log_level,
            help="The logging level of all loggers.",
        )
        parser.add_argument(
            "--decode-log-interval",
            type=int,
            default=ServerArgs.decode_log_interval,
            help="The log interval of decode batch.",
        )
        parser.add_argument(
            "--enable-metrics",
            action="store_true",
            help="Enable log prometheus metrics.",
        )

        # Speculative decoding
        parser.add_argument(
            "--speculative-algorithm",
            type=str,
            choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DDTREE"],
            help="Speculative algorithm.",
        )
        parser.add_argument(
            "--speculative-draft-model-path",
            "--speculative-draft-model",
            type=str,
            help="The path of the draft model weights.",
        )
        parser.add_argument(
            "--speculative-num-steps",
            type=int,
            help="The number of steps sampled from draft model in Speculative Decoding.",
            default=ServerArgs.speculative_num_steps,
        )
        parser.add_argument(
            "--speculative-eagle-topk",
            type=int,
            help="The number of tokens sampled from the draft model in eagle2 each step.",
            default=ServerArgs.speculative_eagle_topk,
        )
        parser.add_argument(
            "--speculative-num-draft-tokens",
            type=int,
            help="The number of tokens sampled from the draft model in Speculative Decoding.",
            default=ServerArgs.speculative_num_draft_tokens,
        )
        parser.add_argument(
            "--speculative-ddtree-budget",
            type=int,
            help="DDTree: the number of draft-tree nodes verified per step (draft tokens = budget + 1).",
            default=ServerArgs.speculative_ddtree_budget,
        )

        # Kernel backend
        parser.add_argument(
            "--attention-backend",
            type=str,
            choices=ATTENTION_BACKEND_CHOICES,
            default=ServerArgs.attention_backend,
            help="Choose the kernels for attention layers.",
        )

        # Optimization/debug options
        parser.add_argument(
            "--disable-cuda-graph",
            action="store_true",
            help="Disable cuda graph.",
        )
        parser.add_argument(
            "--enable-deterministic-inference",
            action="store_true",
            help="Enable deterministic inference mode with batch invariant ops.",
        )
        parser.add_argument(
            "--disable-cuda-graph-padding",
            action="store_true",
            help="Disable cuda graph when padding is needed. Still uses cuda graph when padding is not needed.",
        )
        parser.add_argument(
            "--cuda-graph-max-bs",
            type=int,
            default=ServerArgs.cuda_graph_max_bs,
            help="Set the maximum batch size for cuda graph. It will extend the cuda graph capture batch size to this value.",
        )
        parser.add_argument(
            "--load-format",
            type=str,
            default=ServerArgs.load_format,
            choices=LOAD_FORMAT_CHOICES,
            help='The format of the model weights to load. "dummy" will initialize the '
            "weights with random values, which is mainly for profiling.",
        )
        parser.add_argument(
            "--speculative-draft-load-format",
            type=str,
            default=ServerArgs.speculative_draft_load_format,
            choices=LOAD_FORMAT_CHOICES,
            help="The format of the draft model weights to load. If not specified, will use "
            "the same format as --load-format.",
        )
        parser.add_argument(
            "--cuda-graph-bs",
            type=int,
            nargs="+",
            help="Set the list of batch sizes for cuda graph.",
        )
        parser.add_argument(
            "--skip-server-warmup",
            action="store_true",
            help="If set, skip warmup.",
        )

        # Testbed
        parser.add_argument(
            "--testbed-scenario",
            type=str,
            default=ServerArgs.testbed_scenario,
            help=f"Scenario file or bundled scenario name (default: ${SCENARIO_ENV} or '{DEFAULT_SCENARIO}').",
        )
        parser.add_argument(
            "--testbed-device",
            type=str,
            choices=["auto", "cpu", "cuda"],
            default=ServerArgs.testbed_device,
            help=f"cpu: a simulated GPU; cuda: the verify pass on the real GPU (torch + triton); "
            f"auto: cuda when torch imports and a GPU is present (default: ${DEVICE_ENV} or auto).",
        )
        parser.add_argument(
            "--testbed-time-scale",
            type=float,
            default=ServerArgs.testbed_time_scale,
            help=f"Multiply every simulated duration (default: ${TIME_SCALE_ENV} or the scenario's).",
        )
        parser.add_argument(
            "--testbed-startup-scale",
            type=float,
            default=ServerArgs.testbed_startup_scale,
            help=f"Multiply start-up durations only (load, capture); default: ${STARTUP_SCALE_ENV} or the time scale.",
        )

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ServerArgs:
        args.tp_size = args.tensor_parallel_size
        attrs = [attr.name for attr in dataclasses.fields(cls)]
        return cls(**{attr: getattr(args, attr) for attr in attrs})

    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"http://{host}:{self.port}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ddtestbed.launch_server")
    ServerArgs.add_cli_args(parser)
    return parser


def auto_choose_speculative_params(args: ServerArgs) -> tuple:
    """(steps, topk, draft tokens) when steps are not given, as SGLang 0.5.x chooses them."""
    if args.speculative_algorithm == "STANDALONE":
        return (3, 1, 4)
    return (5, 4, 8)


def prepare_server_args(argv: List[str]) -> ServerArgs:
    """Parse argv like SGLang's `prepare_server_args`: unknown flags print usage and exit 2,
    post-init rewrites apply (topk 1: draft tokens = steps + 1; NEXTN -> EAGLE; torch_native:
    no CUDA graphs) and assert (steps unset with draft tokens given), and the defaults the
    server derives from its GPU and model (here: the scenario's) are filled in, so what comes
    back is what the server will run with. The scenario rides along as `args.scenario_obj`."""
    from ..scenario import ScenarioError, load_scenario
    parser = build_parser()
    raw_args = parser.parse_args(argv)
    args = ServerArgs.from_cli_args(raw_args)
    try:
        check_server_args(args)
        name = args.testbed_scenario or os.environ.get(SCENARIO_ENV) or DEFAULT_SCENARIO
        scenario = load_scenario(name)
        resolve_server_args(args, scenario)
    except (ScenarioError, ValueError) as e:
        parser.error(str(e))
    args.scenario_obj = scenario  # type: ignore[attr-defined]  (not a field: not in asdict)
    return args


def check_server_args(args: ServerArgs) -> None:
    """Cross-flag rules (the ones SGLang enforces in __post_init__ for these flags)."""
    if args.speculative_ddtree_budget is not None:
        if args.speculative_algorithm not in (None, "DDTREE"):
            raise ValueError("--speculative-ddtree-budget requires --speculative-algorithm DDTREE")
        if args.speculative_ddtree_budget < 1:
            raise ValueError("--speculative-ddtree-budget must be >= 1")
        want = args.speculative_ddtree_budget + 1
        if args.speculative_num_draft_tokens not in (None, want):
            raise ValueError(
                f"--speculative-num-draft-tokens ({args.speculative_num_draft_tokens}) must equal "
                f"--speculative-ddtree-budget + 1 ({want})")
    if args.speculative_num_draft_tokens is not None and args.speculative_num_draft_tokens < 1:
        raise ValueError("--speculative-num-draft-tokens must be >= 1")
    for name in ("speculative_num_steps", "speculative_eagle_topk", "cuda_graph_max_bs",
                 "max_running_requests", "tp_size", "decode_log_interval"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    if args.cuda_graph_bs is not None and min(args.cuda_graph_bs) < 1:
        raise ValueError("--cuda-graph-bs values must be >= 1")
    if args.mem_fraction_static is not None and not 0.0 < args.mem_fraction_static < 1.0:
        raise ValueError("--mem-fraction-static must be in (0, 1)")
    for name in ("testbed_time_scale", "testbed_startup_scale"):
        value = getattr(args, name)
        if value is not None and value < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0")


def env_float(name: str) -> Optional[float]:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"${name} must be a number, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"${name} must be >= 0")
    return value


def resolve_server_args(args: ServerArgs, scenario: Scenario) -> None:
    """Fill the defaults SGLang derives at start-up (here: from the scenario's fake GPU/model)."""
    if args.tp_size > scenario.gpu.count:
        raise ValueError(f"--tp-size {args.tp_size} is larger than the number of GPUs "
                         f"({scenario.gpu.count} x {scenario.gpu.name})")
    args.tokenizer_path = args.tokenizer_path or args.model_path
    args.served_model_name = args.served_model_name or args.model_path
    args.context_length = args.context_length or scenario.model.context_len
    # as 0.5.11: the default backend is picked first (its _handle_attention_backend_
    # compatibility runs before _handle_deterministic_inference), then checked like a given one
    args.attention_backend = args.attention_backend or "triton"
    args._handle_deterministic_inference()
    if args.mem_fraction_static is None:
        args.mem_fraction_static = scenario.server.mem_fraction_static
    if args.max_running_requests is None:
        args.max_running_requests = scenario.server.max_running_requests
    if args.cuda_graph_bs:
        # as SGLang 0.5.11's ServerArgs: a given list sets the max bs (its largest entry)
        args.cuda_graph_max_bs = max(args.cuda_graph_bs)
    elif args.cuda_graph_max_bs is None:
        args.cuda_graph_max_bs = scenario.server.cuda_graph_max_bs
    if args.speculative_algorithm is None:
        return
    if args.speculative_num_draft_tokens is None:
        budget = args.speculative_ddtree_budget or scenario.draft.budget
        args.speculative_num_draft_tokens = budget + 1
    if args.speculative_algorithm == "DDTREE":
        args.speculative_ddtree_budget = args.speculative_num_draft_tokens - 1
    if args.speculative_num_steps is None:
        args.speculative_num_steps = scenario.draft.num_steps
    if args.speculative_eagle_topk is None:
        args.speculative_eagle_topk = scenario.draft.topk

