"""The Prometheus names under which engines report their load, cache and latency.

Every reader of engine metrics — the router's scraper, the autoscaler's queries, the
dashboard and the alerts — takes the names from here, so vLLM and SGLang engines are read
the same way everywhere. engine-sim exports vLLM's names.

vLLM (``vllm/v1/metrics/loggers.py``) and SGLang (``sglang/srt/observability/
metrics_collector.py``, checked against 0.5.23; ``tests/fixtures/sglang_metrics.txt`` is
a /metrics page in its format):

| signal | vLLM | SGLang |
| --- | --- | --- |
| requests waiting | ``vllm:num_requests_waiting`` | ``sglang:num_queue_reqs`` |
| requests running | ``vllm:num_requests_running`` | ``sglang:num_running_reqs`` |
| KV cache in use (0..1) | ``vllm:kv_cache_usage_perc`` (older: ``gpu_cache_usage_perc``) | ``sglang:token_usage`` |
| prompt tokens served from cache | ``vllm:prefix_cache_hits_total`` | ``sglang:cached_tokens_total`` (by ``cache_source``) |
| prompt tokens looked up | ``vllm:prefix_cache_queries_total`` | ``sglang:prompt_tokens_total`` |
| finished requests | ``vllm:e2e_request_latency_seconds_count`` | ``sglang:e2e_request_latency_seconds_count`` |
| time to first token | ``vllm:time_to_first_token_seconds`` | ``sglang:time_to_first_token_seconds`` |

SGLang also exports ``sglang:cache_hit_rate``, a gauge of the scheduler's last logging
interval; the counters above give the hit rate over any window instead, like vLLM's. With
priority scheduling SGLang reports its queue gauges twice: the total under ``priority=""``
and one series per priority (``priority="0"``, ...); readers take the total only
(``TOTAL_ONLY``), or the sum would count every request twice.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineMetricNames:
    """One engine family's metric names (the sample names Prometheus stores)."""

    family: str
    waiting: str
    running: str
    kv_usage: tuple[str, ...]  # gauges of the share of KV cache in use, the current name first
    hit_tokens: str  # counter: prompt tokens found in the prefix cache
    query_tokens: str  # counter: prompt tokens looked up in it
    requests: str  # counter: finished requests
    ttft_bucket: str  # histogram buckets of the time to first token

    @property
    def gauges(self) -> tuple[str, ...]:
        return (self.waiting, self.running, *self.kv_usage)


VLLM = EngineMetricNames(
    family="vllm",
    waiting="vllm:num_requests_waiting",
    running="vllm:num_requests_running",
    kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    hit_tokens="vllm:prefix_cache_hits_total",
    query_tokens="vllm:prefix_cache_queries_total",
    requests="vllm:e2e_request_latency_seconds_count",
    ttft_bucket="vllm:time_to_first_token_seconds_bucket",
)

SGLANG = EngineMetricNames(
    family="sglang",
    waiting="sglang:num_queue_reqs",
    running="sglang:num_running_reqs",
    kv_usage=("sglang:token_usage",),
    hit_tokens="sglang:cached_tokens_total",
    query_tokens="sglang:prompt_tokens_total",
    requests="sglang:e2e_request_latency_seconds_count",
    ttft_bucket="sglang:time_to_first_token_seconds_bucket",
)

FAMILIES = (VLLM, SGLANG)
"""Every family a reader accepts; an engine exports one of them, so their sum is its own."""

TOTAL_ONLY = {SGLANG.waiting: 'priority=""', SGLANG.running: 'priority=""'}
"""Label matchers that keep a gauge's total where the engine also reports a breakdown."""

PRIORITY_LABEL = "priority"
