"""engine-sim's /metrics: each scheduler event counted under vLLM's names, in model seconds."""

import pytest

from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.scheduler import Event, EventKind, Sequence
from prefixroute.engine_sim.driver import EngineDriver
from prefixroute.engine_sim.metrics import EngineMetrics

LABELS = {"model_name": "m", "engine": "0"}


def metrics() -> EngineMetrics:
    return EngineMetrics(EngineDriver(EngineConfig(model="m")), "m")


def value(m: EngineMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, {**LABELS, **labels})


def sequence(prompt: int = 100, cached: int = 64, output: int = 8, salt: object = None) -> Sequence:
    seq = Sequence("s", [], prompt, output, arrival=10.0, payload=salt)
    seq.cached_tokens = cached
    return seq


def test_a_start_counts_the_prompt_its_hit_and_its_time_in_the_queue():
    m = metrics()
    m.observe(Event(10.5, EventKind.STARTED, sequence(prompt=100, cached=64)))
    assert value(m, "vllm:prefix_cache_queries_total") == 100
    assert value(m, "vllm:prefix_cache_hits_total") == 64
    assert value(m, "vllm:prompt_tokens_total") == 100
    assert value(m, "vllm:request_queue_time_seconds_sum") == 0.5
    assert value(m, "vllm:time_to_first_token_seconds_count") == 0


def test_first_token_and_finish_are_timed_from_arrival():
    m = metrics()
    seq = sequence(output=8)
    m.observe(Event(10.25, EventKind.FIRST_TOKEN, seq))
    m.observe(Event(12.0, EventKind.FINISHED, seq))
    assert value(m, "vllm:time_to_first_token_seconds_sum") == 0.25
    assert value(m, "vllm:time_to_first_token_seconds_bucket", le="0.25") == 1
    assert value(m, "vllm:time_to_first_token_seconds_bucket", le="0.1") == 0
    assert value(m, "vllm:e2e_request_latency_seconds_sum") == 2.0
    assert value(m, "vllm:generation_tokens_total") == 8
    assert value(m, "vllm:request_success_total", finished_reason="length") == 1
    assert value(m, "vllm:prefix_cache_queries_total") == 0  # counted when a request starts only


@pytest.mark.parametrize(("payload", "label"), [("tenant-a", "tenant-a"), (None, ""), (b"not a salt", "")])
def test_hits_and_queries_are_kept_per_cache_salt(payload, label):
    m = metrics()
    m.observe(Event(10.0, EventKind.STARTED, sequence(prompt=48, cached=32, salt=payload)))
    assert value(m, "engine_sim_prefix_cache_queries_by_salt_total", cache_salt=label) == 48
    assert value(m, "engine_sim_prefix_cache_hits_by_salt_total", cache_salt=label) == 32


async def test_the_gauges_are_read_from_the_scheduler_when_rendered():
    driver = EngineDriver(EngineConfig(model="m", kv_blocks=10, max_running=1))
    m = EngineMetrics(driver, "m")
    driver.submit([], 64, 16)  # 5 blocks of 16 for its prompt and output: half the cache
    driver.submit([], 16, 1)  # waits for the only running slot
    page = m.render().decode()
    assert 'vllm:num_requests_running{engine="0",model_name="m"} 1.0' in page
    assert 'vllm:num_requests_waiting{engine="0",model_name="m"} 1.0' in page
    assert value(m, "vllm:kv_cache_usage_perc") == value(m, "vllm:gpu_cache_usage_perc") == 0.5


async def test_it_listens_to_its_driver():
    driver = EngineDriver(EngineConfig(model="m"))
    m = EngineMetrics(driver, "m")
    driver.submit([], 40, 2)
    assert value(m, "vllm:prefix_cache_queries_total") == 40


async def test_lora_info_names_running_and_waiting_adapters_and_loads_are_counted():
    from prefixroute.engine_model.adapters import AdapterSlots
    from prefixroute.engine_sim.lora import LoraAdapters

    driver = EngineDriver(EngineConfig(model="m", max_running=2, max_loras=1))
    slots = driver.scheduler.adapters
    assert isinstance(slots, AdapterSlots)
    slots.register("sql")
    slots.register("chat")
    m = EngineMetrics(driver, "m", LoraAdapters(slots, {"m"}))
    assert metrics().registry.get_sample_value("vllm:lora_requests_info", {}) is None  # LoRA off: no such series
    for i, adapter in enumerate(("sql", "chat", None)):  # one slot: chat waits behind sql, the base model does not
        driver.submit([], 10, 5, adapter=adapter, payload=str(i))
    text = m.render().decode()
    info = [line for line in text.splitlines() if line.startswith("vllm:lora_requests_info{")]
    assert len(info) == 1  # the current label set only
    assert 'max_lora="1"' in info[0]
    assert 'running_lora_adapters="sql"' in info[0]
    assert 'waiting_lora_adapters="chat"' in info[0]
    assert float(info[0].split()[-1]) > 1e9  # vLLM's value: the time it was set
    assert value(m, "prefixroute_engine_sim_lora_loads_total") == 1
    m.render()
    assert value(m, "prefixroute_engine_sim_lora_loads_total") == 1  # rendering twice counts nothing twice
