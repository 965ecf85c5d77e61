"""engine-sim's /metrics, under vLLM's own names, types and labels.

Routers, autoscalers and dashboards written for vLLM read these unchanged:
gauges of the scheduler's state, the prefix cache counters in tokens
(hits / queries is the hit rate the bench reports), and the latency histograms
with vLLM's buckets. Times are model seconds (see `driver`). Labels are vLLM V1's:
`model_name` and `engine`.

With LoRA adapters on (`--max-loras`), vLLM's `vllm:lora_requests_info` too: a gauge
whose labels name the adapters of running and waiting requests and whose value is
the time it was set. vLLM leaves every earlier label set behind as a stale series;
engine-sim exposes the current one only (a reader taking the newest value, as
vLLM's readers must, reads both alike). vLLM counts no adapter loads; engine-sim
does, as `prefixroute_engine_sim_lora_loads_total`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from prefixroute.engine_model.scheduler import Event, EventKind
from prefixroute.engine_sim.driver import EngineDriver
from prefixroute.engine_sim.lora import LoraAdapters

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
LABELS = ("model_name", "engine")
LORA_LABELS = ("max_lora", "waiting_lora_adapters", "running_lora_adapters")


class EngineMetrics:
    def __init__(self, driver: EngineDriver, model_name: str, lora: LoraAdapters | None = None) -> None:
        self.driver = driver
        self.lora = lora
        self.registry = CollectorRegistry(auto_describe=True)
        r, values = self.registry, (model_name, "0")

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=r).labels(*values)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=r).labels(*values)

        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.gpu_usage = gauge(
            "vllm:gpu_cache_usage_perc", "GPU KV-cache usage. DEPRECATED: Use vllm:kv_cache_usage_perc instead."
        )
        self.queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        )
        self.hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        # engine-sim's own (vLLM has no such series): hits and queries per cache_salt ("" when a
        # request has none), so a test can show that tenants with different salts never hit
        # each other's blocks. One series per salt: a simulator's metric, not for production.
        self.hits_by_salt = Counter(
            "engine_sim_prefix_cache_hits_by_salt",
            "Prefix cache hits in tokens, by the request's cache_salt.",
            (*LABELS, "cache_salt"),
            registry=r,
        )
        self.queries_by_salt = Counter(
            "engine_sim_prefix_cache_queries_by_salt",
            "Prefix cache queries in tokens, by the request's cache_salt.",
            (*LABELS, "cache_salt"),
            registry=r,
        )
        self._values = values
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self.success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            (*LABELS, "finished_reason"),
            registry=r,
        ).labels(*values, "length")
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            LABELS,
            buckets=TTFT_BUCKETS,
            registry=r,
        ).labels(*values)
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        ).labels(*values)
        self.queue = Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        ).labels(*values)
        if lora is not None:
            self.lora_info = Gauge(
                "vllm:lora_requests_info", "Running stats on lora requests.", LORA_LABELS, registry=r
            )
            self.lora_loads = counter(
                "prefixroute_engine_sim_lora_loads", "LoRA adapters brought into a slot (engine-sim's own)."
            )
            self._loads_seen = 0
        driver.listeners.append(self.observe)

    def observe(self, event: Event) -> None:
        seq = event.sequence
        if event.kind is EventKind.STARTED:
            self.queries.inc(seq.prompt_tokens)
            self.hits.inc(seq.cached_tokens)
            salt = seq.payload if isinstance(seq.payload, str) else ""
            self.queries_by_salt.labels(*self._values, salt).inc(seq.prompt_tokens)
            self.hits_by_salt.labels(*self._values, salt).inc(seq.cached_tokens)
            self.prompt_tokens.inc(seq.prompt_tokens)
            self.queue.observe(event.time - seq.arrival)
        elif event.kind is EventKind.FIRST_TOKEN:
            self.ttft.observe(event.time - seq.arrival)
        elif event.kind is EventKind.FINISHED:
            self.generation_tokens.inc(seq.output_tokens)
            self.success.inc()
            self.e2e.observe(event.time - seq.arrival)

    def render(self) -> bytes:
        scheduler = self.driver.scheduler
        usage = scheduler.kv_usage()
        self.running.set(scheduler.num_running)
        self.waiting.set(scheduler.num_waiting)
        self.kv_usage.set(usage)
        self.gpu_usage.set(usage)
        if self.lora is not None:
            self._render_lora(self.lora)
        return generate_latest(self.registry)

    def _render_lora(self, lora: LoraAdapters) -> None:
        scheduler = self.driver.scheduler
        waiting = sorted({s.adapter for s in scheduler.waiting if s.adapter is not None})
        running = sorted(lora.slots.in_use())
        self.lora_info.clear()
        self.lora_info.labels(str(lora.slots.slots), ",".join(waiting), ",".join(running)).set_to_current_time()
        self.lora_loads.inc(lora.slots.loads - self._loads_seen)
        self._loads_seen = lora.slots.loads
