"""The scheduler thread: continuous batching, prefill, speculative decode steps, stats logging.

Like SGLang's scheduler process: new requests are admitted up to --max-running-requests, every
decode step verifies the trees of all running requests in one batch (its size picks the CUDA
graph), and an exception kills the server (`Scheduler hit an exception: ...`).
"""
from __future__ import annotations

import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

from ..model_executor.model_runner import ModelRunner
from ..server_args import ServerArgs
from ..speculative.spec_worker import SpecWorker
from ...version import __version__, decode_separator
from ..utils import sleep_forever
from .schedule_batch import Req

logger = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, server_args: ServerArgs, model_runner: ModelRunner, worker: SpecWorker,
                 on_fatal: Callable[[], None]) -> None:
        self.server_args, self.model_runner, self.worker = server_args, model_runner, worker
        self.on_fatal = on_fatal
        self.max_running_requests = server_args.max_running_requests or 64
        self.spec_enabled = worker.enabled
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.cond = threading.Condition()
        self.forward_ct = 0
        self.spec_num_accepted_tokens = 0
        self.spec_num_forward_ct = 0
        self.spec_total_num_accepted_tokens = 0
        self.spec_total_num_forward_ct = 0
        self.num_generated_tokens = 0
        self.last_decode_stats_tic = time.perf_counter()
        self.last_gen_throughput = 0.0
        self.last_cuda_graph = False
        self.stats: dict[str, float] = {
            "num_running_reqs": 0, "num_queue_reqs": 0, "token_usage": 0.0, "gen_throughput": 0.0,
            "spec_accept_length": 0.0, "spec_accept_rate": 0.0, "cache_hit_rate": 0.0,
            "prompt_tokens_total": 0, "generation_tokens_total": 0, "num_requests_total": 0}
        d = model_runner.scenario.defects
        ndt = server_args.speculative_num_draft_tokens
        self.hang_at_first_batch = d.hang == "warmup" or (
            d.hang_budget is not None and ndt is not None and ndt - 1 == d.hang_budget)
        reported = model_runner.scenario.server.reported_version or __version__
        self.decode_sep = decode_separator(reported)

    # -- API for the tokenizer manager ------------------------------------------------------
    def add_request(self, req: Req) -> None:
        with self.cond:
            self.waiting.append(req)
            self.cond.notify()

    def get_internal_state(self) -> dict[str, Any]:
        runner = self.model_runner
        ret: dict[str, Any] = {
            "last_gen_throughput": self.last_gen_throughput,
            "memory_usage": {
                "weight": round(runner.weight_load_mem_usage, 2),
                "kvcache": round(runner.token_to_kv_pool.mem_usage_gb, 2),
                "token_capacity": int(runner.max_total_num_tokens),
                "graph": round(runner.graph_mem_usage, 2),
            },
            "effective_max_running_requests_per_dp": self.max_running_requests,
        }
        # cumulative since start, including the interval not yet logged
        forward_ct = self.spec_total_num_forward_ct + self.spec_num_forward_ct
        if self.spec_enabled and forward_ct > 0:
            accepted = self.spec_total_num_accepted_tokens + self.spec_num_accepted_tokens
            ret["avg_spec_accept_length"] = accepted / forward_ct
        return ret

    def is_idle(self) -> bool:
        with self.cond:
            return not self.waiting and not self.running

    # -- the loop ---------------------------------------------------------------------------
    def run_event_loop(self) -> None:
        try:
            self._loop()
        except BaseException:
            logger.error(f"Scheduler hit an exception: {traceback.format_exc()}")
            self.on_fatal()

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.waiting and not self.running:
                    self.cond.wait()
                new: list[Req] = []
                while self.waiting and len(self.running) + len(new) < self.max_running_requests:
                    new.append(self.waiting.popleft())
            if self.hang_at_first_batch:
                sleep_forever()  # a kernel that never returns: nothing ever completes
            if new:
                self.run_prefill(new)
            if self.running:
                self.run_decode()

    def run_prefill(self, reqs: list[Req]) -> None:
        runner = self.model_runner
        tic = time.perf_counter()
        admitted, num_tokens = [], 0
        for req in reqs:
            slot = runner.req_to_token_pool.alloc()
            locs = runner.token_to_kv_pool.alloc(len(req.origin_input_ids)) if slot is not None else None
            if slot is None or locs is None:
                if slot is not None:
                    runner.req_to_token_pool.free(slot)
                with self.cond:
                    self.waiting.appendleft(req)
                continue
            req.req_pool_idx = slot
            runner.token_to_kv_pool.write(locs, req.origin_input_ids)
            req.kv_locs.extend(locs)
            first = runner.forward_extend(req.origin_input_ids, req.sampling.temperature,
                                          req.sampling.seed)
            req.append_tokens([first], runner.model_config.context_len, self.worker.num_draft_tokens)
            admitted.append(req)
            num_tokens += len(req.origin_input_ids)
        if not admitted:
            return
        usage = runner.token_to_kv_pool.used() / runner.token_to_kv_pool.size
        logger.info(
            f"Prefill batch. #new-seq: {len(admitted)}, #new-token: {num_tokens}, "
            f"#cached-token: 0, token usage: {usage:.2f}, #running-req: {len(self.running)}, "
            f"#queue-req: {len(self.waiting)}")
        runner.clock.until(tic, runner.prefill_cost_s(num_tokens))
        for req in admitted:
            self.num_generated_tokens += 1
            req.events.put(("update", len(req.output_ids)))
            if req.finished:
                self.release(req)
            else:
                self.running.append(req)

    def run_decode(self) -> None:
        runner, worker = self.model_runner, self.worker
        tic = time.perf_counter()
        reqs = list(self.running)
        result = worker.forward_batch_generation(reqs)
        pool = runner.token_to_kv_pool
        for req, tokens, accepted in zip(reqs, result.new_tokens, result.accepted):
            root = req.committed[-1]
            locs = pool.alloc(1 + accepted)
            if locs is None:
                req.finished_reason = {"type": "abort", "message": "KV cache pool is full"}
                continue
            pool.write(locs, [root] + tokens[:accepted])
            req.kv_locs.extend(locs)
            kept = req.append_tokens(tokens, runner.model_config.context_len,
                                     worker.num_draft_tokens)
            self.num_generated_tokens += kept
            if worker.enabled:
                req.spec_verify_ct += 1
                req.spec_accepted_tokens += accepted
                req.update_spec_acceptance_histogram(accepted)
                self.spec_num_accepted_tokens += accepted + 1
                self.spec_num_forward_ct += 1
        self.forward_ct += 1
        self.last_cuda_graph = result.cuda_graph
        runner.clock.until(tic, runner.step_cost_s(result.padded_bs, worker.num_draft_tokens,
                                                   result.cuda_graph))
        num_running = len(reqs)
        for req in reqs:
            req.events.put(("update", len(req.output_ids)))
            if req.finished:
                self.running.remove(req)
                self.release(req)
        if self.forward_ct % self.server_args.decode_log_interval == 0:
            self.log_decode_stats(num_running)

    def release(self, req: Req) -> None:
        runner = self.model_runner
        runner.token_to_kv_pool.free(req.kv_locs)
        if req.req_pool_idx >= 0:
            runner.req_to_token_pool.free(req.req_pool_idx)
        req.finished_at = time.perf_counter()
        if not req.health_check:
            self.stats["prompt_tokens_total"] += len(req.origin_input_ids)
            self.stats["generation_tokens_total"] += len(req.output_ids)
            self.stats["num_requests_total"] += 1
        req.events.put(("finish", len(req.output_ids)))

    def log_decode_stats(self, num_running: int) -> None:
        now = time.perf_counter()
        gap = max(now - self.last_decode_stats_tic, 1e-9)
        self.last_gen_throughput = self.num_generated_tokens / gap
        self.last_decode_stats_tic, self.num_generated_tokens = now, 0
        pool = self.model_runner.token_to_kv_pool
        used = pool.used()
        usage = used / pool.size
        msg = (f"Decode batch{self.decode_sep} #running-req: {num_running}, #token: {used}, "
               f"token usage: {usage:.2f}, ")
        accept_length = accept_rate = 0.0
        if self.spec_enabled and self.spec_num_forward_ct > 0:
            accept_length = self.spec_num_accepted_tokens / self.spec_num_forward_ct
            total_draft_tokens = self.spec_num_forward_ct * self.worker.num_draft_tokens
            accept_rate = self.spec_num_accepted_tokens / total_draft_tokens
            self.spec_total_num_accepted_tokens += self.spec_num_accepted_tokens
            self.spec_total_num_forward_ct += self.spec_num_forward_ct
            self.spec_num_accepted_tokens = self.spec_num_forward_ct = 0
            msg += f"accept len: {accept_length:.2f}, accept rate: {accept_rate:.2f}, "
        msg += (f"cuda graph: {self.last_cuda_graph}, "
                f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "
                f"#queue-req: {len(self.waiting)}")
        logger.info(msg)
        self.stats.update(num_running_reqs=num_running, num_queue_reqs=len(self.waiting),
                          token_usage=usage, gen_throughput=self.last_gen_throughput,
                          spec_accept_length=accept_length, spec_accept_rate=accept_rate)
