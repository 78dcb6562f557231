"""Prometheus text for /metrics (--enable-metrics), with SGLang's metric names."""
from __future__ import annotations

from collections.abc import Mapping

_GAUGES = (
    ("num_running_reqs", "The number of running requests."),
    ("num_queue_reqs", "The number of requests in the waiting queue."),
    ("token_usage", "The token usage."),
    ("gen_throughput", "The generation throughput (token/s)."),
    ("cache_hit_rate", "The prefix cache hit rate."),
    ("spec_accept_length", "The average acceptance length of speculative decoding."),
    ("spec_accept_rate", "The average acceptance rate of speculative decoding "
                         "(`accepted tokens / total draft tokens` in batch)."),
    ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
)
_COUNTERS = (
    ("prompt_tokens_total", "Number of prefill tokens processed."),
    ("generation_tokens_total", "Number of generation tokens processed."),
    ("num_requests_total", "Number of requests processed."),
)


def render_metrics(stats: Mapping[str, float], labels: Mapping[str, str]) -> str:
    label = ",".join(f'{k}="{v}"' for k, v in labels.items())
    lines = []
    for name, doc in _GAUGES:
        lines += [f"# HELP sglang:{name} {doc}", f"# TYPE sglang:{name} gauge",
                  f"sglang:{name}{{{label}}} {float(stats.get(name, 0.0))}"]
    for name, doc in _COUNTERS:
        lines += [f"# HELP sglang:{name} {doc}", f"# TYPE sglang:{name} counter",
                  f"sglang:{name}{{{label}}} {float(stats.get(name, 0.0))}"]
    return "\n".join(lines) + "\n"
