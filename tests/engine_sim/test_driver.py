"""The driver runs the pure scheduler in model time: wall seconds since start x time_scale.

The clock is injected, so model time moves only when the test says; the scheduler's loop
is woken by a submit or an abort, never by a sleep of the test's."""

import asyncio

import pytest

from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.kv_cache import block_hashes
from prefixroute.engine_model.latency import LatencyModel
from prefixroute.engine_model.scheduler import EventKind
from prefixroute.engine_sim.driver import EngineDriver
from prefixroute.routing.kv_events import AllBlocksCleared, BlockStored

# prefill 1,000 tokens/s, decode 10 tokens/s: a 100-token prompt's first token at 0.1 s
CONFIG = EngineConfig(model="m", kv_blocks=64, max_running=2, latency=LatencyModel(1000.0, 10.0))
SETTLE = 5.0  # seconds a future gets to resolve; it resolves at once, or the test fails


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Sink:
    def __init__(self) -> None:
        self.batches: list[list] = []

    def publish(self, events) -> None:
        self.batches.append(list(events))


def prompt(tokens: int, salt: str | None = None) -> tuple[list[int], list[int]]:
    ids = list(range(tokens))
    return block_hashes(ids, CONFIG.block_tokens, salt), ids


@pytest.mark.parametrize(("scale", "wall", "model"), [(1.0, 0.5, 0.5), (10.0, 0.5, 5.0), (0.5, 2.0, 1.0)])
def test_model_time_is_wall_time_since_start_times_the_scale(scale, wall, model):
    clock = Clock()
    driver = EngineDriver(EngineConfig(time_scale=scale), clock)
    assert driver.now() == 0.0
    clock.now += wall
    assert driver.now() == model
    assert driver.wall_seconds(model) == wall
    assert driver.wall_seconds(-3.0) == 0.0  # a due time already past is no wait


async def test_the_loop_resolves_each_handle_in_model_time_and_a_submit_wakes_it():
    # So slow that, unless a submit wakes it, the loop sleeps far longer than SETTLE: a
    # 100-token prefill takes 100 s, each further output token 100 s.
    slow = EngineConfig(model="m", kv_blocks=64, max_running=4, latency=LatencyModel(1.0, 0.01))
    clock = Clock()
    driver = EngineDriver(slow, clock)
    await driver.start()
    try:
        first = driver.submit(prompt(100)[0], 100, 2)  # first token at 100 s, the second (last) at 200 s
        await asyncio.sleep(0)  # the loop takes its first look at time 0, and waits
        assert not first.first_token.done()
        clock.now += 100.0
        driver.submit(prompt(16)[0], 16, 1)  # wakes the loop, which finds 100 s passed
        await asyncio.wait_for(asyncio.shield(first.first_token), SETTLE)
        assert not first.finished.done()
        clock.now += 100.0
        driver.submit(prompt(16)[0], 16, 1)
        await asyncio.wait_for(asyncio.shield(first.finished), SETTLE)
        assert (first.sequence.first_token, first.sequence.finished) == (100.0, 200.0)
    finally:
        await driver.stop()


async def test_listeners_hear_every_event_in_order():
    clock = Clock()
    driver = EngineDriver(CONFIG, clock)
    heard: list[tuple[EventKind, str]] = []
    driver.listeners.append(lambda event: heard.append((event.kind, event.sequence.id)))
    await driver.start()
    try:
        handle = driver.submit(prompt(100)[0], 100, 2)
        assert heard == [(EventKind.STARTED, handle.sequence.id)]  # at once: the engine was idle
        clock.now += 1.0
        driver.submit(prompt(16)[0], 16, 1)
        await asyncio.wait_for(asyncio.shield(handle.finished), SETTLE)
        mine = [kind for kind, sid in heard if sid == handle.sequence.id]
        assert mine == [EventKind.STARTED, EventKind.FIRST_TOKEN, EventKind.FINISHED]
    finally:
        await driver.stop()


async def test_an_aborted_request_is_dropped_and_its_futures_cancelled():
    driver = EngineDriver(CONFIG, Clock())
    handle = driver.submit(prompt(100)[0], 100, 5)
    assert driver.scheduler.num_running == 1
    driver.abort(handle)
    assert handle.first_token.cancelled()
    assert handle.finished.cancelled()
    assert driver.scheduler.num_running == 0


async def test_aborting_a_waiting_request_takes_it_out_of_the_queue_only():
    driver = EngineDriver(EngineConfig(model="m", max_running=1, latency=CONFIG.latency), Clock())
    running = driver.submit(prompt(100)[0], 100, 5)
    waiting = driver.submit(prompt(50)[0], 50, 5)
    assert (driver.scheduler.num_running, driver.scheduler.num_waiting) == (1, 1)
    driver.abort(waiting)
    assert (driver.scheduler.num_running, driver.scheduler.num_waiting) == (1, 0)
    assert waiting.finished.cancelled()
    assert not running.finished.done()


async def test_a_step_that_stores_blocks_is_published_before_anyone_hears_of_it():
    sink = Sink()
    driver = EngineDriver(CONFIG, Clock(), kv_events=sink)
    published_when_heard: list[int] = []
    driver.listeners.append(lambda event: published_when_heard.append(len(sink.batches)))
    blocks, ids = prompt(40, salt="tenant-a")
    driver.submit(blocks, 40, 1, tokens=ids, salt="tenant-a")
    assert published_when_heard == [1]
    (stored,) = sink.batches[0]
    assert isinstance(stored, BlockStored)
    assert stored.block_hashes == tuple(blocks)
    assert stored.token_ids == tuple(ids[:32])
    assert stored.extra_keys[0] == ("tenant-a",)
    driver.submit(blocks, 40, 1, tokens=ids, salt="tenant-a")  # held already: nothing new to announce
    assert len(sink.batches) == 1


async def test_a_reset_is_published_and_a_driver_without_a_sink_publishes_nothing():
    sink = Sink()
    driver = EngineDriver(CONFIG, Clock(), kv_events=sink)
    driver.reset_cache()
    assert sink.batches == [[AllBlocksCleared()]]
    quiet = EngineDriver(CONFIG, Clock())
    blocks, ids = prompt(40)
    handle = quiet.submit(blocks, 40, 1, tokens=ids)
    quiet.reset_cache()
    assert handle.sequence.tokens is None  # kept only when someone publishes them
    assert len(quiet.cache) == 0


async def test_an_adapter_request_loads_its_adapter_before_its_prefill_and_its_events_carry_its_id():
    lora = EngineConfig(
        model="m", kv_blocks=64, max_running=2, latency=CONFIG.latency, max_loras=1, lora_load_seconds=0.5
    )
    sink = Sink()
    driver = EngineDriver(lora, Clock(), kv_events=sink)
    slots = driver.scheduler.adapters
    assert slots is not None
    assert EngineDriver(CONFIG, Clock()).scheduler.adapters is None  # --max-loras 0: no LoRA at all
    slots.register("sql")
    driver.lora_ids = {"sql": 3}
    ids = list(range(100))
    handle = driver.submit(block_hashes(ids, 16, adapter="sql"), 100, 1, tokens=ids, adapter="sql")
    seq = handle.sequence
    assert seq.adapter == "sql"
    assert seq.adapter_load_seconds == 0.5
    assert seq.first_token == pytest.approx(0.5 + 0.1)  # the load, then 100 tokens at 1,000 tokens/s
    (stored,) = sink.batches[0]
    assert (stored.lora_name, stored.lora_id) == ("sql", 3)
    assert slots.loads == 1
