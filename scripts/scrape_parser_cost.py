"""Cost of reading one engine's /metrics: the router's hand parser vs prometheus_client's.

    .venv/bin/python scripts/scrape_parser_cost.py

The figure behind keeping `front.scrape.parse_engine_metrics` (the router scrapes every
engine every --scrape-interval on the event loop that serves requests) while every cold
reader of Prometheus text uses prometheus_client's parser (`bench.prom`). Prints the time
per scrape of both on the same text, in the same run, and their ratio.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_sim.driver import EngineDriver
from prefixroute.engine_sim.metrics import LABELS, LATENCY_BUCKETS, EngineMetrics
from prefixroute.front.scrape import KV_USAGE, RUNNING, WAITING, parse_engine_metrics


def engine_sim_text() -> str:
    """engine-sim's own /metrics after some observations (every histogram populated)."""
    metrics = EngineMetrics(EngineDriver(EngineConfig()), "sim-model")
    for i in range(50):
        metrics.ttft.observe(i * 0.01)
        metrics.e2e.observe(i * 0.1)
        metrics.queue.observe(i * 0.01)
    return metrics.render().decode()


def vllm_sized_text() -> str:
    """vLLM V1 exposes about a dozen more histograms of the same kind (token counts, TPOT,
    prefill/decode/inference time ...): engine-sim's text plus 12 of them."""
    extra = CollectorRegistry()
    for k in range(12):
        histogram = Histogram(f"vllm:extra_histogram_{k}", "x", LABELS, buckets=LATENCY_BUCKETS, registry=extra)
        histogram.labels("sim-model", "0").observe(1.0)
    return engine_sim_text() + generate_latest(extra).decode()


def with_library(text: str) -> dict[str, float]:
    """What the scraper needs, read with prometheus_client's parser."""
    sums = dict.fromkeys((*WAITING, *RUNNING, *KV_USAGE), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in sums:
                sums[sample.name] += sample.value
    return sums


def per_call(parse: Callable[[str], object], text: str, calls: int = 400) -> float:
    """Median over 7 rounds of the seconds one call takes."""
    rounds = []
    for _ in range(7):
        started = time.perf_counter()
        for _ in range(calls):
            parse(text)
        rounds.append((time.perf_counter() - started) / calls)
    return statistics.median(rounds)


def main() -> None:
    for label, text in (("engine-sim /metrics", engine_sim_text()), ("vLLM-sized /metrics", vllm_sized_text())):
        assert sum(with_library(text)[n] for n in WAITING) == parse_engine_metrics(text).waiting  # same answer
        ours, library = per_call(parse_engine_metrics, text), per_call(with_library, text)
        print(
            f"{label}: {len(text.splitlines())} lines, {len(text)} bytes; hand parser {ours * 1e6:.0f} us, "
            f"prometheus_client {library * 1e6:.0f} us per scrape: x{library / ours:.1f}"
        )


if __name__ == "__main__":
    main()
