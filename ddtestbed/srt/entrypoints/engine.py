"""Start-up wiring: tokenizer and model, then the scheduler thread that owns the GPU.

As in SGLang, the model runner (weight load, KV pool, CUDA-graph capture) is built inside the
scheduler (here a thread named like SGLang's TP0 process); a failure there is logged as
`Scheduler hit an exception: Traceback ...` and takes the whole server down.
"""
from __future__ import annotations

import logging
import threading
import time
import traceback
from dataclasses import dataclass

from ...knowledge import load_tasks, suite_path
from ...model import DraftModel, TargetModel
from ...scenario import Scenario
from ...tokenizer import Tokenizer
from ..managers.scheduler import Scheduler
from ..managers.tokenizer_manager import TokenizerManager
from ..model_executor.model_runner import ModelRunner
from ..server_args import ServerArgs
from ..speculative.spec_worker import SpecWorker
from ..utils import SCHEDULER_THREAD, SimClock, die_like_sglang

logger = logging.getLogger(__name__)


@dataclass
class Engine:
    server_args: ServerArgs
    scenario: Scenario
    tokenizer: Tokenizer
    scheduler: Scheduler
    tokenizer_manager: TokenizerManager


def build_model(scenario: Scenario, *, random_weights: bool = False
                ) -> tuple[Tokenizer, TargetModel]:
    tokenizer = Tokenizer(scenario.model.vocab_size)
    path = suite_path()
    tasks = load_tasks(path)
    if path is None:
        logger.warning("No coding suite found: the model only knows generic text.")
    return tokenizer, TargetModel(tokenizer, tasks, random_weights=random_weights)


def start_engine(server_args: ServerArgs, scenario: Scenario, clock: SimClock) -> Engine:
    tokenizer, target = build_model(scenario,
                                    random_weights=server_args.load_format == "dummy")
    # as SGLang 0.5.11's scheduler: the draft loads with --speculative-draft-load-format when
    # given, else with --load-format (the same ServerArgs)
    draft_format = server_args.speculative_draft_load_format or server_args.load_format
    if server_args.speculative_draft_load_format is not None:
        logger.info(f"Using draft model load_format: '{draft_format}'")
    draft = DraftModel(target, scenario.draft.accuracy, scenario.draft.decay,
                       random_weights=draft_format == "dummy")
    ready = threading.Event()
    box: dict[str, Scheduler] = {}

    def scheduler_died() -> None:
        # SGLang's parent can outlive its scheduler for a while (the HTTP front answers, its
        # requests never complete); then SIGQUIT takes the whole process down
        linger = scenario.defects.front_linger_s
        if linger > 0:
            for handler in logging.getLogger().handlers:
                handler.flush()
            time.sleep(linger)
        die_like_sglang(logger)

    def scheduler_main() -> None:
        try:
            runner_cls: type[ModelRunner] = ModelRunner
            if server_args.testbed_device == "cuda":
                # imported only here: the CPU mode never touches torch
                from ...cuda.model_runner import CudaModelRunner
                runner_cls = CudaModelRunner
            model_runner = runner_cls(server_args, scenario, target, clock)
            worker = SpecWorker(model_runner, draft)
            scheduler = Scheduler(server_args, model_runner, worker, on_fatal=scheduler_died)
        except BaseException:
            logger.error(f"Scheduler hit an exception: {traceback.format_exc()}")
            die_like_sglang(logger)
            return
        box["scheduler"] = scheduler
        ready.set()
        scheduler.run_event_loop()

    threading.Thread(target=scheduler_main, name=SCHEDULER_THREAD, daemon=True).start()
    ready.wait()
    scheduler = box["scheduler"]
    return Engine(server_args, scenario, tokenizer, scheduler,
                  TokenizerManager(server_args, tokenizer, scheduler))
