"""Engines' /metrics feed the load view: vLLM's names (both for KV usage) and SGLang's."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prefixroute.front.scrape import parse_engine_metrics
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.request import routing_request

SGLANG_TEXT = (Path(__file__).resolve().parents[1] / "fixtures" / "sglang_metrics.txt").read_text()

VLLM_TEXT = """\
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
vllm:num_requests_running{engine="0",model_name="m"} 7.0
vllm:num_requests_running_total_bogus 99
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 12.0
vllm:num_requests_waiting{label="has } brace"} 1 1700000000
vllm:num_requests_running NaN
"""


def test_parses_vllm_text() -> None:
    load = parse_engine_metrics(VLLM_TEXT)
    assert (load.waiting, load.running, load.kv_usage) == (5.0, 7.0, 0.42)


def test_parses_sglang_text_counting_the_queue_totals_once() -> None:
    """The fixture's queues are 5 waiting and 7 running, each also broken down by priority."""
    load = parse_engine_metrics(SGLANG_TEXT)
    assert (load.waiting, load.running, load.kv_usage) == (5.0, 7.0, 0.42)


def test_a_priority_breakdown_is_told_from_a_label_that_only_ends_in_priority() -> None:
    text = 'sglang:num_queue_reqs{job_priority="1",priority=""} 2\nsglang:num_queue_reqs{x="a",priority="3"} 9\n'
    assert parse_engine_metrics(text).waiting == 2.0


def test_reads_the_old_kv_name() -> None:
    assert parse_engine_metrics("vllm:gpu_cache_usage_perc 0.9\n").kv_usage == 0.9


def test_garbage_is_zero() -> None:
    load = parse_engine_metrics("vllm:num_requests_waiting{oops\nvllm:num_requests_running x\n\x00")
    assert (load.waiting, load.running, load.kv_usage) == (0.0, 0.0, 0.0)


async def test_scraper_reports_to_the_load_view(engines, start_router) -> None:
    a, b = await engines(2)
    a.behaviour.metrics_text = VLLM_TEXT
    await b.stop()  # unreachable: reports zero, not stale numbers
    router = await start_router([a.url, b.url], scrape_interval=0.05)
    for _ in range(750):
        if router.state.load.get(a.url).engine_running == 7.0:
            break
        await asyncio.sleep(0.02)
    load = router.state.load.get(a.url)
    assert (load.engine_waiting, load.engine_running, load.kv_usage) == (5.0, 7.0, 0.42)
    assert router.state.load.get(b.url).requests == 0


async def test_scraped_queues_steer_least_load(engines, start_router, client) -> None:
    """An engine whose own queue is long (other routers' traffic) gets no new requests."""
    from prefixroute.routing.config import RoutingConfig

    busy, idle = await engines(2)
    busy.behaviour.metrics_text = "vllm:num_requests_waiting 12\nvllm:num_requests_running 8\n"
    router = await start_router(
        [busy.url, idle.url], scrape_interval=0.05, routing=RoutingConfig(strategy="least-load", block_size=16)
    )
    for _ in range(750):
        if router.state.load.get(busy.url).requests == 20:
            break
        await asyncio.sleep(0.02)
    for i in range(10):
        r = await client.post(router.url + "/v1/completions", json={"prompt": f"p{i}"})
        assert r.headers["X-Prefixroute-Member"] == idle.url
    assert busy.received == []


VLLM_LORA = """\
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="old",waiting_lora_adapters=""} 1.7e9
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,poems",waiting_lora_adapters="law"} 1.7000001e9
vllm:num_requests_waiting{model_name="m"} 2.0
"""


def test_the_newest_lora_series_names_the_adapters_in_use() -> None:
    load = parse_engine_metrics(VLLM_LORA)
    assert load.adapters == frozenset({"sql", "poems", "law"})  # not "old": an earlier series
    assert load.waiting == 2.0


def test_an_engine_without_lora_reports_no_adapters() -> None:
    assert parse_engine_metrics('vllm:num_requests_waiting{model_name="m"} 1\n').adapters is None
    idle = 'vllm:lora_requests_info{max_lora="4",running_lora_adapters="",waiting_lora_adapters=""} 5\n'
    assert parse_engine_metrics(idle).adapters == frozenset()


async def test_scraped_adapters_join_the_routers_residency_belief(engines, start_router) -> None:
    (a,) = await engines(1)
    a.behaviour.metrics_text = VLLM_LORA
    routing = RoutingConfig(block_size=16, prefix_blocks=2, adapter_slots=4)
    router = await start_router([a.url], scrape_interval=0.05, routing=routing)
    member = router.state.fleet.by_name[a.url]
    asked = routing_request("a prompt for the sql adapter", routing, adapter="sql")
    for _ in range(750):
        if router.state.dispatcher.strategy.adapter_resident(asked, member):
            break
        await asyncio.sleep(0.02)
    assert router.state.dispatcher.strategy.adapter_resident(asked, member) is True
    never = routing_request("a prompt for another adapter", routing, adapter="other")
    assert router.state.dispatcher.strategy.adapter_resident(never, member) is False
