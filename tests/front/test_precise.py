"""Precise mode end to end on real processes' sockets: engine-sim publishes, two routers follow.

Two router replicas in front of two engine-sims publishing their KV events over ZMQ:
a prefix that only replica A ever routed is found by replica B on the same engine,
from the engine's own events; a cache reset empties both replicas' view of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from prefixroute.bench.peers import event_health
from prefixroute.front.precise import PreciseSettings
from prefixroute.router.app import RunningRouter, build_app, start_router
from prefixroute.router.settings import RouterSettings
from prefixroute.routing.config import RoutingConfig
from tests.engine_sim.conftest import publishing_engine_sims
from tests.polling import until

SYSTEM = "You are a careful assistant who answers in one short sentence. " * 8


@pytest.fixture
async def fleet() -> AsyncIterator[dict[str, Any]]:
    serving: list[RunningRouter] = []
    async with publishing_engine_sims(2) as (engines, events):
        routers = []
        try:
            for _ in range(2):
                settings = RouterSettings(
                    backends=tuple(engines),
                    routing=RoutingConfig(block_size=16, prefix_blocks=2),
                    precise=PreciseSettings(
                        mode="precise", tokenizer="engine-sim", served_model="sim-model", kv_events=tuple(events)
                    ),
                )
                router = await start_router(build_app(settings))
                serving.append(router)
                routers.append((f"http://127.0.0.1:{router.port}", router.app.state))
            yield {"engines": engines, "routers": routers}
        finally:
            for router in reversed(serving):
                await router.close()


async def ask(session: aiohttp.ClientSession, router: str, text: str) -> tuple[str, int]:
    body = {
        "model": "sim-model",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
    }
    async with session.post(router + "/v1/chat/completions", json={**body, "max_tokens": 1}) as resp:
        assert resp.status == 200, await resp.text()
        answer = await resp.json()
        return resp.headers["X-Prefixroute-Member"], answer["usage"]["prompt_tokens_details"]["cached_tokens"]


async def test_a_replica_routes_by_what_another_replicas_request_left_in_an_engine(fleet):
    (url_a, state_a), (url_b, state_b) = fleet["routers"]
    async with aiohttp.ClientSession() as session:
        await asyncio.sleep(0.5)  # both routers' SUB sockets reach both engines
        member, cached = await ask(session, url_a, "first question")
        assert cached == 0
        # replica B never saw that request; the engine's BlockStored tells it. (An engine nobody
        # sent work to is trusted with its empty view from the start, so trust alone is not
        # the sign: the stored blocks are.)
        await until(
            lambda: (
                state_b.precise.follower.precise(member) and state_b.dispatcher.strategy.index.stored.size(member) > 0
            ),
            "replica B to learn the engine's blocks",
        )
        other_member, cached_b = await ask(session, url_b, "second question")
        assert other_member == member
        assert cached_b > 0  # the engine confirms: the shared system prompt was a hit
        # ...and B chose it knowing so (a miss would follow the ring to the same place): its
        # belief of the match, from A's request's events alone, is in its match-ratio metric
        ratio_sum = next(
            float(line.split()[-1])
            for line in state_b.metrics.render().decode().splitlines()
            if line.startswith("prefixroute_router_prefix_match_ratio_sum")
        )
        assert ratio_sum > 0.5
        assert state_a.dispatcher.strategy.index.stored.size(member) == state_b.dispatcher.strategy.index.stored.size(
            member
        )
        # a reset reaches both replicas as AllBlocksCleared
        engine = next(u for u in fleet["engines"] if u.rstrip("/") == member)
        async with session.post(engine + "/reset_prefix_cache") as resp:
            assert resp.status == 200
        for state in (state_a, state_b):
            await until(lambda s=state: s.dispatcher.strategy.index.stored.size(member) == 0, "the reset to arrive")
        metrics = state_b.metrics.render().decode()
        assert f'prefixroute_router_kv_events_precise{{member="{member}"}} 1.0' in metrics
        assert f'prefixroute_router_kv_events_total{{kind="clears",member="{member}"}} 1.0' in metrics
        assert f'prefixroute_router_kv_events_behind{{member="{member}"}} 0.0' in metrics
        lagged = next(
            float(line.split()[-1])
            for line in metrics.splitlines()
            if line.startswith("prefixroute_router_kv_event_lag_seconds_count")
        )
        assert lagged >= 2  # every live message applied was timed: the stores and the reset
        # bench peers reads the same exposition to tell whether a live precise run stayed precise;
        # the other engine got no work and has published nothing: it holds nothing to learn of,
        # so it is followed too (a new prefix may go there as to any followed member)
        health = event_health([metrics])
        assert health["clears"] == 1.0
        assert health["events"] > 0
        assert health["not_precise"] == 0.0


async def test_a_router_keys_an_adapter_s_request_as_the_engine_announces_its_blocks(tmp_path):
    """The request names adapter `sql` as its model; the engine serves it with that adapter and
    announces its blocks with vLLM's lora_name; the router keys the request with the adapter in
    its first block's seed and finds every one of its full blocks held on that engine."""
    from dataclasses import replace

    from prefixroute.engine_sim.lora import LoraModule, write_adapter_folder
    from tests.engine_sim.conftest import FAST

    module = LoraModule("sql", str(write_adapter_folder(tmp_path / "sql")))
    async with publishing_engine_sims(1, replace(FAST, max_loras=2), [module]) as (engines, events):
        settings = RouterSettings(
            backends=tuple(engines),
            routing=RoutingConfig(block_size=16, prefix_blocks=2),
            precise=PreciseSettings(
                mode="precise", tokenizer="engine-sim", served_model="sim-model", kv_events=tuple(events)
            ),
        )
        router = await start_router(build_app(settings))
        state, url = router.app.state, f"http://127.0.0.1:{router.port}"
        try:
            body = {"model": "sql", "messages": [{"role": "system", "content": SYSTEM}], "max_tokens": 1}
            async with aiohttp.ClientSession() as session:
                await asyncio.sleep(0.5)  # the router's SUB socket reaches the engine
                async with session.post(url + "/v1/chat/completions", json=body) as resp:
                    assert resp.status == 200, await resp.text()
                    member = resp.headers["X-Prefixroute-Member"]
            stored = state.dispatcher.strategy.index.stored
            await until(lambda: stored.size(member) > 0, "the engine's BlockStored to reach the router")
            keys = state.precise.request("chat", body, None, None, adapter="sql")  # as the pipeline keys it
            assert len(keys.blocks) > 2
            assert stored.matched(member, keys.blocks) == len(keys.blocks)
            base = state.precise.request("chat", {**body, "model": "sim-model"}, None, None)
            assert stored.matched(member, base.blocks) == 0  # the base model's blocks are other blocks
            other = state.precise.request("chat", {**body, "model": "chat"}, None, None, adapter="chat")
            assert stored.matched(member, other.blocks) == 0  # and so are another adapter's
        finally:
            await router.close()


def test_precise_mode_needs_a_tokenizer_and_one_endpoint_per_backend():
    with pytest.raises(ValueError, match="needs --tokenizer"):
        RouterSettings(backends=("http://a",), precise=PreciseSettings(mode="precise", kv_events=("tcp://a:1",)))
    with pytest.raises(ValueError, match="needs --kv-events"):
        RouterSettings(backends=("http://a",), precise=PreciseSettings(mode="precise", tokenizer="engine-sim"))
    with pytest.raises(ValueError, match="need --mode precise"):
        RouterSettings(backends=("http://a",), precise=PreciseSettings(tokenizer="engine-sim", kv_events_port=5557))
    with pytest.raises(ValueError, match="one endpoint per backend"):
        RouterSettings(
            backends=("http://a", "http://b"),
            precise=PreciseSettings(mode="precise", tokenizer="engine-sim", kv_events=("tcp://a:1",)),
        )
    with pytest.raises(ValueError, match="tcp://"):
        RouterSettings(
            backends=("http://a",), precise=PreciseSettings(mode="precise", tokenizer="engine-sim", kv_events=("a:1",))
        )


@pytest.fixture(scope="module")
def chat_folder(tmp_path_factory):
    from tests.chat_models import model_folder

    return model_folder(tmp_path_factory.mktemp("chatml"), "chatml", "llama3")


def _long_prompt(chars: int) -> str:
    import random

    rng = random.Random(3)
    words = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    out, length = [], 0
    while length < chars:
        out.append(rng.choice(words) + rng.choice([" ", ", ", ".\n"]))
        length += len(out[-1])
    return "".join(out)


async def test_a_long_prompt_is_tokenized_off_the_loop_while_a_short_one_is_keyed(chat_folder):
    import time

    from prefixroute.front.precise import OFF_LOOP_CHARS, PreciseMode
    from prefixroute.routing.dispatch import Dispatcher
    from prefixroute.routing.request import RoutingRequest

    config = RoutingConfig(block_size=16)
    mode = PreciseMode(PreciseSettings(tokenizer=str(chat_folder)), config, Dispatcher(config), (), time.monotonic)
    long_body = {"model": "m", "prompt": _long_prompt(50 * OFF_LOOP_CHARS)}
    short_body = {"model": "m", "messages": [{"role": "user", "content": "the cache holds"}]}
    try:
        later = mode.keys("completion", long_body, None, None)
        assert not isinstance(later, RoutingRequest)
        order: list[str] = []
        ticks = 0

        async def long_one() -> RoutingRequest:
            keys = await later
            order.append("long")
            return keys

        async def short_one() -> None:
            await asyncio.sleep(0)
            assert isinstance(mode.keys("chat", short_body, None, None), RoutingRequest)  # short: on the loop
            order.append("short")

        waiting = asyncio.ensure_future(long_one())
        await short_one()
        while not waiting.done():  # the loop keeps turning while the long prompt is tokenized
            ticks += 1
            await asyncio.sleep(0)
        assert order == ["short", "long"]
        assert ticks > 1
        assert waiting.result() == mode.request("completion", long_body, None, None)  # the same keys, now stored
        assert mode.token_store()["reused_tokens"] > 0  # type: ignore[index]
    finally:
        await mode.stop()


async def test_a_hub_tokenizer_comes_after_startup_and_the_router_serves_meanwhile(chat_folder, tmp_path, monkeypatch):
    """The hub has no such model at first: the router serves anyway (approximately), says why on
    /metrics, and keys by the model's tokens once the hub has it."""
    import time

    from prefixroute.front.precise import PreciseMode
    from prefixroute.routing.dispatch import Dispatcher
    from tests.hub_server import Hub, Repo, serving
    from tests.router.backend import FakeEngine

    hub = Hub()
    monkeypatch.delenv("HF_TOKEN", raising=False)
    engine = FakeEngine("e0")
    await engine.start()
    config = RoutingConfig(block_size=16)
    body = {"model": "m", "prompt": "the cache holds the router's blocks"}
    with serving(hub):
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        settings = RouterSettings(
            backends=(engine.url,),
            routing=config,
            precise=PreciseSettings(tokenizer="acme/chat", tokenizer_cache=str(tmp_path / "cache")),
        )
        router = await start_router(build_app(settings))
        url, state = f"http://127.0.0.1:{router.port}", router.app.state
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(url + "/v1/completions", json=body) as resp:
                    assert resp.status == 200
                await until(lambda: state.precise.tokenizer.failing is not None, "the first refusal")
                async with session.get(url + "/metrics") as resp:
                    text = await resp.text()
                assert 'prefixroute_router_tokenizer_ready{source="hub"} 0.0' in text
                assert 'prefixroute_router_tokenizer_failing{reason="not_found"} 1.0' in text
                hub.repos["acme/chat"] = Repo(chat_folder)  # retried after a pause of about two seconds
                await until(lambda: state.precise.tokens is not None, "the tokenizer", tries=400)
                async with session.get(url + "/metrics") as resp:
                    assert 'prefixroute_router_tokenizer_ready{source="hub"} 1.0' in await resp.text()
        finally:
            await router.close()
            await engine.stop()
    local = PreciseMode(PreciseSettings(tokenizer=str(chat_folder)), config, Dispatcher(config), (), time.monotonic)
    assert state.precise.request("completion", body, None, None) == local.request("completion", body, None, None)


def test_a_tokenizer_revision_is_for_a_hub_tokenizer_only():
    RouterSettings(backends=("http://a",), precise=PreciseSettings(tokenizer="acme/m", tokenizer_revision="v1"))
    with pytest.raises(ValueError, match="--tokenizer-revision is for"):
        RouterSettings(backends=("http://a",), precise=PreciseSettings(tokenizer="engine-sim", tokenizer_revision="v1"))
